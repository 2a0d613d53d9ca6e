#!/usr/bin/env python3
"""What transformers and sentence-transformers do with a directory `xsent quantize` wrote.

Usage: check-quantized-load.py SOURCE_MODEL QUANTISED_DIR
(run with the bench venv: /root/.cache/xsent/bench-venv/bin/python).

For each loader it prints either "loaded" with the cosine of its vectors to the source model's
on a few sentences, or "refused" with the first line of the error. Exit status 1 if a loader
loads the directory but gives vectors far from the source (cosine < 0.99): a silent wrong
model is the one outcome that must not happen.
"""
import sys
import warnings

warnings.filterwarnings("ignore")

src, out = sys.argv[1], sys.argv[2]
sentences = ["Hallo Welt", "The cat sat on the mat, then left.", "Thank you very much!"]
bad = False


def first_line(e):
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:300]


try:
    import torch
    from transformers import AutoModel, AutoTokenizer

    def mean_pooled(path):
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).eval()
        b = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            h = model(**b).last_hidden_state
        m = b["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)

    ref = mean_pooled(src)
    try:
        got = mean_pooled(out)
        cos = (ref * got).sum(-1)
        print(f"transformers AutoModel: loaded; cosine to the source min {cos.min():.4f} mean {cos.mean():.4f}")
        bad |= bool(cos.min() < 0.99)
    except Exception as e:  # noqa: BLE001 - the outcome is what is reported
        print(f"transformers AutoModel: refused: {first_line(e)}")
except ImportError as e:
    print(f"transformers: not installed ({e})")

try:
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(src, device="cpu").encode(sentences, normalize_embeddings=True, convert_to_tensor=True)
    try:
        got = SentenceTransformer(out, device="cpu").encode(sentences, normalize_embeddings=True, convert_to_tensor=True)
        cos = (ref * got).sum(-1)
        print(f"sentence-transformers: loaded; cosine to the source min {cos.min():.4f} mean {cos.mean():.4f}")
        bad |= bool(cos.min() < 0.99)
    except Exception as e:  # noqa: BLE001
        print(f"sentence-transformers: refused: {first_line(e)}")
except ImportError as e:
    print(f"sentence-transformers: not installed ({e})")

sys.exit(1 if bad else 0)

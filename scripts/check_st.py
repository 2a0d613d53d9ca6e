"""The sentence-transformers side of scripts/check-st.sh (run in the benchmarks' torch venv).

usage: check_st.py MODEL_DIR SENTENCES.txt XSENT.npy

Loads MODEL_DIR with SentenceTransformer (on the CPU, offline), encodes every line of
SENTENCES.txt with `encode` (the model's default prompt), `encode_query` and `encode_document`
(the query and document prompts), and compares each vector with the same row of XSENT.npy
(`xsent embed --format npy` of the same lines). Prints one tab-separated line: the number of sentences, the modules loaded
(comma-separated), the default prompt (JSON), the smallest cosine and the largest absolute
difference over the three ways of encoding (a row that is zero in both engines counts as
cosine 1).
"""

import json
import sys

import numpy as np
from sentence_transformers import SentenceTransformer


def main() -> None:
    model_dir, sentences_path, xsent_path = sys.argv[1:4]
    with open(sentences_path, encoding="utf-8") as f:
        sentences = f.read().split("\n")
    if sentences and sentences[-1] == "":
        sentences.pop()  # the newline that ends the file, not an empty sentence
    model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
    ours = np.load(xsent_path)
    cos, diff = [], []
    for encode in (model.encode, model.encode_query, model.encode_document):
        theirs = encode(sentences, batch_size=16, convert_to_numpy=True)
        if ours.shape != theirs.shape:
            sys.exit(f"xsent gave {ours.shape}, sentence-transformers' {encode.__name__} {theirs.shape}")
        norms = np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
        # A sentence with no tokens (the empty line, for a tokenizer that adds no special tokens)
        # is the zero vector: it counts as agreeing when both engines give zero.
        both_zero = (np.abs(ours).max(1) == 0) & (np.abs(theirs).max(1) == 0)
        cos.append(np.where(norms > 0, (ours * theirs).sum(1) / np.where(norms > 0, norms, 1), both_zero.astype(float)).min())
        diff.append(np.abs(ours - theirs).max())
    modules = ",".join(type(m).__name__ for m in model)
    prompt = model.prompts.get(model.default_prompt_name) if model.default_prompt_name else None
    print(len(sentences), modules, json.dumps(prompt), f"{min(cos):.10f}", f"{max(diff):.3e}", sep="\t")


if __name__ == "__main__":
    main()

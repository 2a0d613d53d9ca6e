"""Write tests/data/checkpoints/: the tiny fixture checkpoints of ../shared/fixtures re-saved by
Hugging Face transformers and sentence-transformers in the other weight layouts xsent reads, so
that the tests check xsent's readers against files the reference libraries wrote.

Run once with a Python that has torch, transformers and sentence-transformers (the benchmarks'
venv, scripts/lib/torch-venv.sh), from the repository root:

    ~/.cache/xsent/bench-venv/bin/python scripts/make-checkpoint-fixtures.py ../shared/fixtures tests/data/checkpoints

It writes
- bert-mlm-bin/: tiny-bert-mlm (BertForMaskedLM: `bert.` names, the heads, the decoder tied to
  the word embeddings) as one pytorch_model.bin, float32;
- xlmr-mlm-sharded/: tiny-xlm-roberta-mlm as a sharded safetensors checkpoint
  (model.safetensors.index.json + model-0000N-of-0000M.safetensors), float32;
- xlmr-f16-sharded-bin/: tiny-xlm-roberta in float16 as a sharded PyTorch checkpoint
  (pytorch_model.bin.index.json + pytorch_model-0000N-of-0000M.bin);
- dense-bin/: a sentence-transformers Dense module (32 → 8, tanh) saved as pytorch_model.bin,
  and dense-expected.json: its output on tiny-bert's mean-pooled vectors (expected.json).
Only config.json and the weight files are kept.
"""
import json
import pathlib
import shutil
import sys

import torch
from sentence_transformers.models import Dense
from transformers import AutoModel, AutoModelForMaskedLM

fixtures, out = (pathlib.Path(a) for a in sys.argv[1:3])
out.mkdir(parents=True, exist_ok=True)


def fresh(name):
    d = out / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    return d


def save_pytorch(model, name):
    """One pytorch_model.bin as transformers 4 wrote it (save_pretrained(safe_serialization=False)):
    torch.save of the state dict, tied tensors sharing one storage."""
    d = fresh(name)
    model.config.to_json_file(d / "config.json")
    torch.save(model.state_dict(), d / "pytorch_model.bin")
    return d


def save_sharded(model, name, max_shard_size, pytorch):
    """transformers' sharded checkpoint: the shards and the index save_pretrained writes; for
    PyTorch (pytorch=True) the same shards re-saved as transformers 4 named and wrote them
    (pytorch_model-0000N-of-0000M.bin, pytorch_model.bin.index.json)."""
    d = fresh(name)
    model.save_pretrained(d, max_shard_size=max_shard_size)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    if pytorch:
        from safetensors.torch import load_file

        renamed = {}
        for shard in sorted(set(index["weight_map"].values())):
            new = shard.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
            torch.save(load_file(d / shard), d / new)
            (d / shard).unlink()
            renamed[shard] = new
        index["weight_map"] = {k: renamed[v] for k, v in index["weight_map"].items()}
        (d / "model.safetensors.index.json").unlink()
        (d / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    for f in d.iterdir():
        if f.name != "config.json" and not f.name.startswith(("pytorch_model", "model")):
            f.unlink()
    return d


for d in [
    save_pytorch(AutoModelForMaskedLM.from_pretrained(fixtures / "tiny-bert-mlm"), "bert-mlm-bin"),
    save_sharded(AutoModelForMaskedLM.from_pretrained(fixtures / "tiny-xlm-roberta-mlm"), "xlmr-mlm-sharded", "100KB", False),
    save_sharded(AutoModel.from_pretrained(fixtures / "tiny-xlm-roberta").half(), "xlmr-f16-sharded-bin", "40KB", True),
]:
    print(d.name, sorted(f.name for f in d.iterdir()))

torch.manual_seed(0)
dense = Dense(32, 8, activation_function=torch.nn.Tanh())
d = fresh("dense-bin")
dense.save(str(d), safe_serialization=False)
print("dense-bin", sorted(f.name for f in d.iterdir()))
pooled = torch.tensor(json.loads((fixtures / "tiny-bert" / "expected.json").read_text())["mean_pooled"])
with torch.no_grad():
    y = dense({"sentence_embedding": pooled})["sentence_embedding"]
(out / "dense-expected.json").write_text(json.dumps({"input": "tiny-bert/expected.json mean_pooled", "output": y.tolist()}))

#!/usr/bin/env python3
"""ONNX Runtime side of scripts/bench-embed-dtype.sh: the same model exported with
torch.onnx and quantised with onnxruntime's dynamic int8 quantisation.

Subcommands (run by bench-embed-dtype.sh; usable by hand too):

  export --model DIR --out MODEL.onnx [--max-seq-length N]
      Loads DIR with sentence-transformers and exports its transformer
      (input_ids, attention_mask -> last_hidden_state) with torch.onnx, batch
      and sequence axes dynamic.

  quantize --in MODEL.onnx --out MODEL.int8.onnx [--no-fuse]
      First onnxruntime.transformers.optimizer (model_type bert: fused
      attention, LayerNorm, GELU; what ORT's own BERT recipe does), then
      onnxruntime.quantization.quantize_dynamic: int8 weights per output
      channel (QInt8, symmetric), uint8 activations quantised per tensor at run
      time, integer MatMuls (MatMulInteger / DynamicQuantizeMatMul).

  bench --onnx MODEL.onnx --model DIR --input FILE --max-seq-length N
        [--prefix P] [--batch-size 64] [--threads 2] [--repeat 1] --out VECS.npy
      Encodes every line as sentence-transformers' encode does (sorted by
      length, batches of --batch-size padded to their longest, tokenizer of
      DIR, mean pooling over the attention mask or the pooling DIR's
      1_Pooling/config.json names, L2 normalisation), with one ORT session of
      --threads intra-op threads; one warm-up batch first; the timing covers
      tokenising, the session runs and pooling.  Saves the vectors (N x dim,
      float32, input order) and prints one JSON line.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_embed_torch import read_lines, setup_env, tokenizer_from_json  # noqa: E402


def load_st(model_dir, max_len):
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(model_dir, device="cpu")
    if not os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
        model[0].processor = tokenizer_from_json(model_dir, max_len)
    model.max_seq_length = max_len
    return model


def export(a):
    setup_env(2)
    import torch

    model = load_st(a.model, a.max_seq_length)
    bert = model[0].auto_model.eval()

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones((2, 16), dtype=torch.long)
    mask = torch.ones((2, 16), dtype=torch.long)
    with torch.no_grad():
        torch.onnx.export(
            Wrap(bert), (ids, mask), a.out, input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"], opset_version=17, dynamo=False,
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "last_hidden_state": {0: "batch", 1: "seq"}})
    print(json.dumps({"exported": a.out, "torch": torch.__version__}))


def quantize(a):
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src = a.inp
    fused = None
    if not a.no_fuse:
        from onnxruntime.transformers import optimizer
        opt = optimizer.optimize_model(a.inp, model_type="bert", num_heads=0, hidden_size=0, opt_level=1)
        fused = a.out + ".fused.onnx"
        opt.save_model_to_file(fused)
        src = fused
    import onnx
    # The fused graph's com.microsoft ops have no ONNX shape inference: their outputs are f32.
    quantize_dynamic(src, a.out, weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    if fused:
        os.remove(fused)
    print(json.dumps({"quantized": a.out, "onnxruntime": onnxruntime.__version__, "fused": not a.no_fuse,
                      "weight_type": "QInt8", "per_channel": True}))


def pooling_mode(model_dir):
    path = os.path.join(model_dir, "1_Pooling", "config.json")
    if not os.path.exists(path):
        return "mean"
    cfg = json.load(open(path))
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    return "mean"


def bench(a):
    setup_env(a.threads)
    import numpy as np
    import onnxruntime as ort

    model = load_st(a.model, a.max_seq_length)
    tok = model.tokenizer
    mode = pooling_mode(a.model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    sents = [a.prefix + s for s in read_lines(a.input)]

    def encode(xs):
        order = sorted(range(len(xs)), key=lambda i: -len(xs[i]))  # as sentence-transformers
        out = [None] * len(xs)
        for s in range(0, len(xs), a.batch_size):
            idx = order[s:s + a.batch_size]
            t = tok([xs[i] for i in idx], padding=True, truncation=True,
                    max_length=a.max_seq_length, return_tensors="np")
            feed = {"input_ids": t["input_ids"].astype(np.int64),
                    "attention_mask": t["attention_mask"].astype(np.int64)}
            feed = {k: v for k, v in feed.items() if k in names}
            h = sess.run(None, feed)[0]
            if mode == "cls":
                v = h[:, 0]
            else:
                m = t["attention_mask"][..., None].astype(np.float32)
                v = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            for j, i in enumerate(idx):
                out[i] = v[j]
        return np.stack(out)

    encode(sents[:8])  # warm-up
    best = None
    for _ in range(max(1, a.repeat)):
        t0 = time.perf_counter()
        vecs = encode(sents)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    np.save(a.out, vecs)
    print(json.dumps({
        "engine": "onnxruntime", "onnxruntime": ort.__version__, "onnx": os.path.basename(a.onnx),
        "threads": a.threads, "n": len(sents), "dim": int(vecs.shape[1]), "pooling": mode,
        "max_seq_length": a.max_seq_length, "batch_size": a.batch_size,
        "encode_s": round(best, 4), "sent_per_s": round(len(sents) / best, 2),
    }))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--model", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--max-seq-length", type=int, default=512)
    q = sub.add_parser("quantize")
    q.add_argument("--in", dest="inp", required=True)
    q.add_argument("--out", required=True)
    q.add_argument("--no-fuse", action="store_true")
    b = sub.add_parser("bench")
    b.add_argument("--onnx", required=True)
    b.add_argument("--model", required=True)
    b.add_argument("--input", required=True)
    b.add_argument("--max-seq-length", type=int, required=True)
    b.add_argument("--prefix", default="")
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--repeat", type=int, default=1)
    b.add_argument("--out", required=True)
    a = p.parse_args()
    {"export": export, "quantize": quantize, "bench": bench}[a.cmd](a)


if __name__ == "__main__":
    main()

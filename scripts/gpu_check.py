#!/usr/bin/env python3
"""Python side of scripts/gpu-check.sh and the GPU benchmarks (torch, transformers and
sentence-transformers as the GPU machine has them; numpy). Subcommands:

  models --out DIR --e5 E5_DIR [--small]
      Random-initialised models, seeded, as sentence-transformers directories (Transformer,
      mean Pooling, Normalize) that xsent loads too: e5s (multilingual-e5-small's config: BERT,
      384 wide, 12 layers, 250k vocabulary), e5s-teacher (the same shape, another seed) and
      xlmr-base (XLM-R base's shape: 768 wide, 12 layers, 250,002 tokens). All use e5's
      tokenizer.json (XLM-R's SentencePiece vocabulary). --small: 2 layers, 64 wide (rehearsals).
  sentences --data DIR --n N --out FILE
      N Tatoeba sentences (all tatoeba.*.{xxx,eng} files, in turn), one per line.
  pairs --n N --seed S --out FILE      synthetic en<TAB>de word pairs (tests/common's word_pairs)
  words --out FILE                     the 80 words of those pairs (for the tiny fixtures' tokenizer)
  tiny-model --fixture DIR --words FILE --out DIR   a fixture checkpoint with a word-level tokenizer
  cosines --a A.npy --b B.npy          min cosine and max |a - b| of two row sets (JSON)
  losses --a METRICS --b METRICS       max relative difference of the step losses (JSON)
  torch-embed --model DIR --input FILE --dtype f32|bf16 --batch 64 [--out Y.npy] [--repeat 2]
      sentence-transformers' encode on the GPU: sentences/s of the best repeat (model loaded
      and warmed up first), and the vectors.
  torch-train distill|dueam --student DIR [--teacher DIR] --pairs FILE --batch B --steps N [--precision f32|bf16]
              [--skip K] [--check-loss]
      One training step of the recipe in torch on the GPU (fp32, the recipe's loss, fused AdamW,
      clipping at 1.0): sentences/s, the median over steps K+1..N (default K 2; bench-train-gpu.sh
      passes xsent's window), JSON. --check-loss: also "check_loss", the loss of the first batch
      (the file's first B pairs) with dropout off, before any update (bench-train-gpu.sh compares
      it with xsent's step-1 loss with dropout off).
  xsent-sps --metrics FILE --skip K    sentences/s of xsent's steps after the first K (JSON)
  paper-config --paper TOML --model DIR --data DIR --out TOML
      A *-paper.toml for 50 steps on the data and models at hand (see gpu-check.sh).
  table --results FILE                 the summary table of gpu-check.sh
  ncu-summary --a N.csv --b 2N.csv --steps N --step-s S   one step's kernels and GPU time (ncu logs)
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

# The torch side's device: the GPU, or the CPU in gpu-check.sh's rehearsal (XSENT_GPU_REHEARSAL=1).
DEV = os.environ.get("XSENT_TORCH_DEVICE", "cuda")


def _sync():
    if DEV == "cuda":
        import torch
        torch.cuda.synchronize()


def _peak_gib():
    import torch
    return torch.cuda.max_memory_allocated() / 2**30 if DEV == "cuda" else None


def _st_files(out, dim, max_len):
    """modules.json, sentence_bert_config.json, 1_Pooling, 2_Normalize (as xsent and ST read them)."""
    mods = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump(mods, f, indent=1)
    with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": max_len, "do_lower_case": False}, f)
    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": dim, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}, f)
    os.makedirs(os.path.join(out, "2_Normalize"), exist_ok=True)


def models(a):
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    with open(os.path.join(a.e5, "config.json")) as f:
        e5cfg = json.load(f)
    small = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4} if a.small else {}
    made = {}
    specs = [
        ("e5s", BertConfig, BertModel, {**e5cfg, **small}, 0),
        ("e5s-teacher", BertConfig, BertModel, {**e5cfg, **small}, 1),
        ("xlmr-base", XLMRobertaConfig, XLMRobertaModel, {
            "vocab_size": 250002, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
            "bos_token_id": 0, "eos_token_id": 2, "layer_norm_eps": 1e-5, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, **small}, 2),
    ]
    for name, cfg_cls, model_cls, cfg, seed in specs:
        t0 = time.perf_counter()
        out = os.path.join(a.out, name)
        if os.path.exists(os.path.join(out, "model.safetensors")):
            made[name] = "kept"
            continue
        os.makedirs(out, exist_ok=True)
        torch.manual_seed(seed)
        cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "transformers_version")}
        model = model_cls(cfg_cls(**cfg), add_pooling_layer=False)
        model.save_pretrained(out, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.e5, f), os.path.join(out, f))
        _st_files(out, cfg["hidden_size"], 128)
        made[name] = round(time.perf_counter() - t0, 1)
    print(json.dumps({"models": made, "small": a.small}))


def sentences(a):
    import glob
    files = sorted(glob.glob(os.path.join(a.data, "tatoeba", "tatoeba.*")))
    if not files:
        sys.exit(f"sentences: no tatoeba.* files under {a.data}/tatoeba")
    lines = []
    per = [open(p, encoding="utf-8").read().splitlines() for p in files]
    i = 0
    while len(lines) < a.n and any(i < len(p) for p in per):
        for p in per:
            if i < len(p) and p[i].strip() and len(lines) < a.n:
                lines.append(p[i].strip())
        i += 1
    # Repeat when the files hold fewer (the speed runs want many).
    base = list(lines)
    while len(lines) < a.n:
        lines.extend(base[: a.n - len(lines)])
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"sentences": len(lines), "files": len(files)}))


def _word_pairs(n, seed):
    en = [f"house{i}" for i in range(40)]
    de = [f"haus{i}" for i in range(40)]
    x = seed
    mask = (1 << 64) - 1
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        length = 3 + (x >> 60) % 5
        s, t = [], []
        for _ in range(length):
            x = (x * 6364136223846793005 + 1442695040888963407) & mask
            w = (x >> 33) % 40
            s.append(en[w])
            t.append(de[w])
        out.append((" ".join(s), " ".join(t)))
    return out


def pairs(a):
    with open(a.out, "w", encoding="utf-8") as f:
        for s, t in _word_pairs(a.n, a.seed):
            f.write(f"{s}\t{t}\n")


def words(a):
    with open(a.out, "w") as f:
        f.write("\n".join([f"house{i}" for i in range(40)] + [f"haus{i}" for i in range(40)]) + "\n")


def tiny_model(a):
    """tests/common's tiny_model: the fixture's config and weights, a word-level tokenizer."""
    os.makedirs(a.out, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(a.fixture, f), os.path.join(a.out, f))
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])}
    for w in open(a.words).read().split():
        vocab[w] = len(vocab)
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "Whitespace"},
           "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
           "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    with open(os.path.join(a.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def cosines(a):
    import numpy as np
    x, y = np.load(a.a).astype(np.float64), np.load(a.b).astype(np.float64)
    if x.shape != y.shape:
        sys.exit(f"cosines: shapes {x.shape} and {y.shape}")
    num = (x * y).sum(1)
    den = np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-30)
    print(json.dumps({"rows": int(x.shape[0]), "min_cosine": float((num / den).min()), "max_abs_diff": float(np.abs(x - y).max())}))


def _steps(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [r for r in rows if "loss" in r]


def losses(a):
    x, y = _steps(a.a), _steps(a.b)
    if [r["step"] for r in x] != [r["step"] for r in y] or not x:
        sys.exit(f"losses: steps differ: {[r['step'] for r in x]} vs {[r['step'] for r in y]}")
    rel = [abs(p["loss"] - q["loss"]) / max(abs(p["loss"]), 1e-12) for p, q in zip(x, y)]
    print(json.dumps({"steps": len(x), "max_rel_diff": max(rel), "first": [x[0]["loss"], y[0]["loss"]], "last": [x[-1]["loss"], y[-1]["loss"]]}))


def xsent_sps(a):
    rows = _steps(a.metrics)[a.skip:]
    if not rows:
        sys.exit(f"xsent-sps: no steps after the first {a.skip} in {a.metrics}")
    sps = [r["sentences_per_s"] for r in rows]
    print(json.dumps({"steps": len(rows), "sentences_per_s": statistics.median(sps),
                      "step_s": statistics.median(r["step_s"] for r in rows),
                      "forward_s": statistics.median(r["forward_s"] for r in rows),
                      "backward_s": statistics.median(r["backward_s"] for r in rows),
                      "optimizer_s": statistics.median(r["optimizer_s"] for r in rows)}))


def _st(model_dir, device, dtype):
    import torch
    from sentence_transformers import SentenceTransformer
    m = SentenceTransformer(model_dir, device=device)
    if dtype == "bf16":
        m = m.to(torch.bfloat16)
    return m


def torch_embed(a):
    import numpy as np
    import torch
    texts = [l.rstrip("\n") for l in open(a.input, encoding="utf-8")]
    t0 = time.perf_counter()
    m = _st(a.model, DEV, a.dtype)
    load_s = time.perf_counter() - t0
    m.encode(texts[: 4 * a.batch], batch_size=a.batch, show_progress_bar=False)  # warm-up
    best, vecs = None, None
    for _ in range(a.repeat):
        _sync()
        t0 = time.perf_counter()
        v = m.encode(texts, batch_size=a.batch, show_progress_bar=False, convert_to_numpy=True)
        _sync()
        s = time.perf_counter() - t0
        if best is None or s < best:
            best, vecs = s, v
    if a.out:
        np.save(a.out, vecs.astype(np.float32))
    print(json.dumps({"engine": "sentence-transformers", "dtype": a.dtype, "sentences": len(texts), "encode_s": best,
                      "sentences_per_s": len(texts) / best, "load_s": load_s, "peak_mem_gib": _peak_gib()}))


def torch_train(a):
    """One step of distill (MSE of student(src), student(tgt) to the teacher's src vectors) or
    DuEAM (L_A − λ L_B with precomputed WMDs) in torch, as xsent computes them. --precision bf16:
    the forward and the loss under torch.autocast(bfloat16) (bf16 matrix products, f32 weights,
    optimizer state and the ops autocast keeps in f32), as xsent's train.precision = "bf16"."""
    import contextlib
    import torch
    torch.manual_seed(0)
    pairs_ = [l.rstrip("\n").split("\t")[:2] for l in open(a.pairs, encoding="utf-8") if l.strip()]
    student = _st(a.student, DEV, "f32")
    student.max_seq_length = a.max_length
    if a.recipe == "dueam":
        # The learner's unnormalised mean-pooled vectors: Transformer + Pooling only.
        from sentence_transformers import SentenceTransformer
        student = SentenceTransformer(modules=[student[0], student[1]], device=DEV)
    teacher_vecs = None
    if a.recipe == "distill":
        teacher = _st(a.teacher, DEV, "f32")
        with torch.no_grad():
            teacher_vecs = teacher.encode([p[0] for p in pairs_], batch_size=64, convert_to_tensor=True, show_progress_bar=False).float().clone()
        del teacher
    tokenize = student.preprocess if hasattr(student, "preprocess") else student.tokenize
    params = [p for p in student.parameters() if p.requires_grad]
    named = [(n, p) for n, p in student.named_parameters() if p.requires_grad]
    nd = [p for n, p in named if n.endswith(".bias") or "LayerNorm" in n]
    ids = {id(p) for p in nd}
    opt = torch.optim.AdamW([{"params": [p for _, p in named if id(p) not in ids], "weight_decay": 0.01},
                             {"params": nd, "weight_decay": 0.0}], lr=2e-5, fused=DEV == "cuda")
    wmd = torch.rand(a.batch, device=DEV) + 0.5
    mixed = (lambda: torch.autocast(device_type=DEV, dtype=torch.bfloat16)) if a.precision == "bf16" else contextlib.nullcontext
    b = a.batch

    def step_loss(at, batch):
        fs, ft = tokenize([p[0] for p in batch]), tokenize([p[1] for p in batch])
        fs = {k: v.to(DEV) if hasattr(v, "to") else v for k, v in fs.items()}
        ft = {k: v.to(DEV) if hasattr(v, "to") else v for k, v in ft.items()}
        with mixed():
            es, et = student(fs)["sentence_embedding"], student(ft)["sentence_embedding"]
            if a.recipe == "distill":
                target = teacher_vecs[at: at + b]
                return torch.nn.functional.mse_loss(es, target) + torch.nn.functional.mse_loss(et, target)
            d = ((es - et) ** 2).sum(1).add(1e-12).sqrt()
            l_a = torch.exp(torch.abs(torch.exp(-d) - torch.exp(-wmd))).mean()
            l_b = torch.nn.functional.cosine_similarity(es, et, dim=1, eps=1e-12).mean()
            return l_a - 0.003 * l_b

    check_loss = None
    if a.check_loss:
        # The first batch's loss with dropout off (eval mode), before any update: what xsent's
        # step 1 logs with its dropout set to 0 on the same pairs.
        student.eval()
        with torch.no_grad():
            check_loss = float(step_loss(0, pairs_[:b]))
    student.train()
    times = []
    for step in range(a.steps):
        at = (step * b) % max(1, len(pairs_) - b)
        batch = pairs_[at: at + b]
        _sync()
        t0 = time.perf_counter()
        loss = step_loss(at, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        _sync()
        times.append(time.perf_counter() - t0)
    timed = times[a.skip:]
    if not timed:
        sys.exit(f"torch-train: no steps after the first {a.skip} of {a.steps}")
    step_s = statistics.median(timed)
    print(json.dumps({"engine": "torch", "recipe": a.recipe, "precision": a.precision, "batch_pairs": b, "steps": a.steps,
                      "timed_steps": [a.skip + 1, a.steps], "step_s": step_s,
                      "sentences_per_s": 2 * b / step_s, "check_loss": check_loss, "peak_mem_gib": _peak_gib()}))


def _ncu_kernels(path):
    """(name, seconds) of each kernel in an `ncu --csv --metrics gpu__time_duration.sum
    --print-units base` log (ns)."""
    import csv
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            v = float(r["Metric Value"].replace(",", ""))
            rows.append((r.get("Kernel Name", "?"), v * (1e-9 if r.get("Metric Unit", "ns") in ("ns", "nsecond") else 1.0)))
    return rows


def ncu_summary(a):
    """One step's kernels and GPU seconds from two ncu logs of N and 2N steps, beside the
    unprofiled step time: where the step waits."""
    ka, kb = _ncu_kernels(a.a), _ncu_kernels(a.b)
    n = (len(kb) - len(ka)) / a.steps
    gpu = (sum(t for _, t in kb) - sum(t for _, t in ka)) / a.steps
    by = {}
    for name, t in kb:
        short = name.split("(")[0].split("<")[0][:40]
        by[short] = by.get(short, 0.0) + t
    top = sorted(by.items(), key=lambda x: -x[1])[:5]
    host = (a.step_s - gpu) / n * 1e6 if n > 0 else float("nan")
    print(f"{n:.0f} kernels/step, GPU busy {gpu * 1e3:.1f} ms of a {a.step_s * 1e3:.1f} ms step "
          f"({100 * gpu / a.step_s:.0f} %), host {host:.1f} us per kernel beyond the GPU's time; "
          f"most GPU time ({2 * a.steps} steps + load): " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in top))


def _toml(d, prefix=""):
    """A small TOML writer for xsent's configs (tables, arrays of tables, scalars, lists)."""
    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        raise TypeError(f"cannot write {v!r}")
    out = []
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict) and not (isinstance(v, list) and v and isinstance(v[0], dict))}
    for k, v in scalars.items():
        out.append(f"{k} = {val(v)}")
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.append(f"\n[{name}]")
            out.append(_toml(v, name + "."))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                out.append(f"\n[[{name}]]")
                out.append(_toml(item, name + "."))
    return "\n".join(out)


def paper_config(a):
    """The paper's schedule and sizes, with: the model(s) replaced by a random XLM-R-base-shaped
    one (the GPU machine downloads nothing), the data by what travelled (XNLI en-xx for distill
    and lightweight and sp, the config's own XNLI and Multi30k for DuEAM), 50 steps, no
    validation or checkpoint before the end."""
    import tomllib
    with open(a.paper, "rb") as f:
        c = tomllib.load(f)
    r = c["recipe"]
    xnli = os.path.join(a.data, "xnli")
    sources = [{"kind": "xnli", "dir": xnli, "splits": ["dev", "test"], "pivot": "en", "langs": ["de", "fr", "es", "ru", "zh", "ar"]}]
    if r == "distill":
        c["distill"]["teacher"] = a.model
        c["distill"]["student"] = a.model
    if r == "dueam":
        c["dueam"]["anchor"] = a.model
        c["dueam"]["learner"] = a.model
        c["dueam"]["xnli_dir"] = xnli
        for v in c["dueam"].get("val_sources", []):
            for k in ("src", "tgt"):
                v[k] = v[k].replace("${XSENT_DATA}", a.data).replace("../shared/data", a.data)
    if r in ("distill", "lightweight", "sp"):
        c.setdefault("data", {})["sources"] = sources
        c["data"]["val_size"] = 200
    c["train"].update({"device": a.device, "max_steps": 50, "eval_every": 0, "checkpoint_every": 0, "log_every": 1, "keep_last": 1})
    c["train"].pop("epochs", None)
    c["train"]["keep_best"] = False
    with open(a.out, "w") as f:
        f.write(_toml(c) + "\n")


def table(a):
    rows = [json.loads(l) for l in open(a.results) if l.strip()]
    w = max([len(r["check"]) for r in rows] + [5])
    print()
    print(f"{'check':<{w}} | {'result':<58} | {'target':<22} | ok   | s")
    print("-" * w + "-+-" + "-" * 58 + "-+-" + "-" * 22 + "-+------+------")
    for r in rows:
        ok = {True: "yes", False: "NO", None: "-"}[r.get("ok")]
        print(f"{r['check']:<{w}} | {str(r.get('result', ''))[:58]:<58} | {str(r.get('target', ''))[:22]:<22} | {ok:<4} | {r.get('secs', '')}")
    bad = [r["check"] for r in rows if r.get("ok") is False]
    print()
    print("all checks passed" if not bad else f"{len(bad)} check(s) failed: {', '.join(bad)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    s = p.add_subparsers(dest="cmd", required=True)
    x = s.add_parser("models"); x.add_argument("--out", required=True); x.add_argument("--e5", required=True); x.add_argument("--small", action="store_true")
    x = s.add_parser("sentences"); x.add_argument("--data", required=True); x.add_argument("--n", type=int, required=True); x.add_argument("--out", required=True)
    x = s.add_parser("pairs"); x.add_argument("--n", type=int, required=True); x.add_argument("--seed", type=int, default=3); x.add_argument("--out", required=True)
    x = s.add_parser("words"); x.add_argument("--out", required=True)
    x = s.add_parser("tiny-model"); x.add_argument("--fixture", required=True); x.add_argument("--words", required=True); x.add_argument("--out", required=True)
    x = s.add_parser("cosines"); x.add_argument("--a", required=True); x.add_argument("--b", required=True)
    x = s.add_parser("losses"); x.add_argument("--a", required=True); x.add_argument("--b", required=True)
    x = s.add_parser("xsent-sps"); x.add_argument("--metrics", required=True); x.add_argument("--skip", type=int, default=2)
    x = s.add_parser("torch-embed"); x.add_argument("--model", required=True); x.add_argument("--input", required=True)
    x.add_argument("--dtype", choices=("f32", "bf16"), default="f32"); x.add_argument("--batch", type=int, default=64)
    x.add_argument("--out"); x.add_argument("--repeat", type=int, default=2)
    x = s.add_parser("torch-train"); x.add_argument("recipe", choices=("distill", "dueam")); x.add_argument("--student", required=True)
    x.add_argument("--teacher"); x.add_argument("--pairs", required=True); x.add_argument("--batch", type=int, default=32)
    x.add_argument("--steps", type=int, default=10); x.add_argument("--max-length", type=int, default=128)
    x.add_argument("--precision", choices=("f32", "bf16"), default="f32")
    x.add_argument("--skip", type=int, default=2); x.add_argument("--check-loss", action="store_true")
    x = s.add_parser("paper-config"); x.add_argument("--paper", required=True); x.add_argument("--model", required=True)
    x.add_argument("--data", required=True); x.add_argument("--out", required=True); x.add_argument("--device", default="cuda")
    x = s.add_parser("table"); x.add_argument("--results", required=True)
    x = s.add_parser("ncu-summary"); x.add_argument("--a", required=True); x.add_argument("--b", required=True)
    x.add_argument("--steps", type=int, required=True); x.add_argument("--step-s", type=float, required=True)
    a = p.parse_args()
    {"models": models, "sentences": sentences, "pairs": pairs, "words": words, "tiny-model": tiny_model, "cosines": cosines,
     "losses": losses, "xsent-sps": xsent_sps, "ncu-summary": ncu_summary, "torch-embed": torch_embed, "torch-train": torch_train,
     "paper-config": paper_config, "table": table}[a.cmd.replace("_", "-")](a)


if __name__ == "__main__":
    main()

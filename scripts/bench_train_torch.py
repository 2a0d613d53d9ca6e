#!/usr/bin/env python3
"""PyTorch / sentence-transformers side of scripts/bench-train.sh.

Subcommands (run by bench-train.sh; usable by hand too, in its venv):

  pick-pairs --xnli-dir DIR --tokenizer TOKENIZER.json --prefix P --max-length 128
             --n 32 --out PAIRS.tsv
      Chooses N distinct XNLI dev premises (dev-en.tsv row i = dev-de.tsv row i) whose
      English and German student inputs (P + sentence) both tokenise to L..L+s tokens,
      for the smallest slack s that allows it and the L nearest the median English
      premise length.  Run with max length L, every one of the 2N inputs is exactly L
      tokens (the longer ones lose at most s tokens): no padding anywhere, so both
      engines compute on exactly 2N x L tokens however they group or pad the batch.
      Writes `en<TAB>de` lines; prints one JSON line with L ("length").

  bench --student DIR --teacher DIR --pairs PAIRS.tsv --prefix P --max-length 128
        [--expect-length L] [--steps 8] [--skip 2] [--threads 2] [--lr 5e-5]
      The distillation step of xsent's distill recipe in PyTorch: student = the
      student dir's Transformer + mean Pooling + Dense(384, 384, identity) + Normalize
      (Dense initialised by ridge least squares like xsent's projection = "lstsq"),
      teacher embeddings of the English side computed before timing, loss
      MSE(student(src), T) + MSE(student(tgt), T) via sentence_transformers.losses.MSELoss
      (which averages over src and tgt, so it is doubled), AdamW (weight decay 0.01, none
      on biases and LayerNorm, eps 1e-6 as xsent; --adamw fused by default, which is what
      SentenceTransformerTrainer uses with torch >= 2.8), global-norm clipping at 1.0, train
      mode (dropout from the model config).  Times each phase of every step; prints one
      JSON line.

  xsent-metrics --metrics metrics.jsonl --steps N --skip K
      The same summary (medians of steps K+1..N) from xsent's metrics.jsonl.

  report --xsent JSON... --torch JSON... (and the run's facts)
      Prints the side-by-side table.
"""
import argparse
import json
import os
import statistics
import sys
import time

PHASES = ("step_s", "forward_s", "backward_s", "optimizer_s")


# ----------------------------------------------------------- pick-pairs --

def _xnli_premises(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n").split("\t")[0] for line in f]


def pick_pairs(a):
    from tokenizers import Tokenizer

    en_path = os.path.join(a.xnli_dir, "dev-en.tsv")
    de_path = os.path.join(a.xnli_dir, "dev-de.tsv")
    en, de = _xnli_premises(en_path), _xnli_premises(de_path)
    if len(en) != len(de):
        sys.exit(f"pick-pairs: {en_path} has {len(en)} rows but {de_path} has {len(de)}")
    tok = Tokenizer.from_file(a.tokenizer)
    tok.no_padding()
    tok.no_truncation()
    seen_en, seen_de, cands = set(), set(), []
    for e, d in zip(en, de):
        e, d = e.strip(), d.strip()
        if not e or not d or e in seen_en or d in seen_de or "\t" in e + d:
            continue
        seen_en.add(e)
        seen_de.add(d)
        cands.append((e, d))
    if not cands:
        sys.exit("pick-pairs: no premises found")
    enc = tok.encode_batch([(a.prefix + s).strip() for c in cands for s in c])
    lens = [(len(enc[2 * i].ids), len(enc[2 * i + 1].ids)) for i in range(len(cands))]
    median = statistics.median(le for le, _ in lens)
    # Smallest slack s such that some length L near the median has n pairs whose two sides
    # are L..L+s tokens long: with max length L, all 2n inputs are then exactly L tokens.
    for slack in range(0, 9):
        fits = {}
        for (e, d), (le, ld) in zip(cands, lens):
            for length in range(max(8, max(le, ld) - slack), min(le, ld, a.max_length) + 1):
                fits.setdefault(length, []).append((e, d, le, ld))
        ok = [l for l, ps in fits.items() if len(ps) >= a.n and abs(l - median) <= 0.25 * median]
        if ok:
            break
    else:
        sys.exit(f"pick-pairs: cannot find {a.n} premises whose en and de inputs are within 8 tokens of "
                 f"each other near the median length {median}")
    length = min(ok, key=lambda l: (abs(l - median), l))
    chosen = fits[length][: a.n]
    with open(a.out, "w", encoding="utf-8") as f:
        for e, d, _, _ in chosen:
            f.write(f"{e}\t{d}\n")
    print(json.dumps({
        "pairs": len(chosen), "length": length, "slack": slack, "source": "XNLI dev premises en-de",
        "distinct_premises": len(cands), "median_en_premise_tokens": median,
        "untruncated_tokens": sum(le + ld for _, _, le, ld in chosen),
        "cut_tokens": sum(le + ld - 2 * length for _, _, le, ld in chosen),
    }))


# ---------------------------------------------------------------- bench --

def _embed_helper():
    """scripts/bench_embed_torch.py (beside this file), imported on first use."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import bench_embed_torch
    return bench_embed_torch


def _tokenizer_fix(model_dir, max_len):
    """bench-embed's rule: a dir without tokenizer_config.json uses its tokenizer.json as is."""
    return _embed_helper().tokenizer_from_json(model_dir, max_len)


def fit_affine(x, y, ridge=1e-3):
    """xsent's fit_affine: y ~ W x + b by ridge least squares (penalty ridge * mean diag XtX)."""
    import numpy as np
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, din = x.shape
    xa = np.concatenate([x, np.ones((n, 1))], axis=1)
    xtx = xa.T @ xa
    lam = ridge * np.trace(xtx[:din, :din]) / din
    xtx[np.arange(din), np.arange(din)] += lam
    sol = np.linalg.solve(xtx, xa.T @ y)  # [din + 1, dout]
    return sol[:din].T.astype(np.float32), sol[din].astype(np.float32)


def bench(a):
    _embed_helper().setup_env(a.threads)  # the same environment as bench-embed's torch side
    import numpy as np
    import torch
    import transformers
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer import losses
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import losses, models

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    torch.manual_seed(42)

    with open(a.pairs, encoding="utf-8") as f:
        pairs = [line.rstrip("\r\n").split("\t")[:2] for line in f if line.strip()]
    src = [p[0] for p in pairs]
    tgt = [p[1] for p in pairs]
    n = len(pairs)

    # Teacher embeddings of the source sentences: once, before any timing.
    t0 = time.perf_counter()
    teacher = SentenceTransformer(a.teacher, device="cpu")
    if not os.path.exists(os.path.join(a.teacher, "tokenizer_config.json")):
        teacher[0].processor = _tokenizer_fix(a.teacher, a.max_length)
    teacher.max_seq_length = a.max_length
    teacher.eval()
    with torch.no_grad():
        target = teacher.encode(src, batch_size=64, convert_to_tensor=True, show_progress_bar=False).float()
    target = target.clone()  # out of inference mode: autograd may save it
    del teacher
    teacher_s = time.perf_counter() - t0

    # Student: the dir's Transformer and Pooling, then Dense and Normalize.
    base = SentenceTransformer(a.student, device="cpu")
    if not os.path.exists(os.path.join(a.student, "tokenizer_config.json")):
        base[0].processor = _tokenizer_fix(a.student, a.max_length)
    base.max_seq_length = a.max_length
    trans, pool = base[0], base[1]
    pcfg = pool.get_config_dict() if isinstance(pool, models.Pooling) else {}
    if not (pcfg.get("pooling_mode") == "mean" or pcfg.get("pooling_mode_mean_tokens")):
        sys.exit(f"bench: the student's second module is not mean pooling: {pool}")
    dim = (pool.get_embedding_dimension() if hasattr(pool, "get_embedding_dimension")
           else pool.get_sentence_embedding_dimension())
    tdim = int(target.shape[1])
    dense = models.Dense(in_features=dim, out_features=tdim, bias=True,
                         activation_function=torch.nn.Identity())
    model = SentenceTransformer(modules=[trans, pool, dense, models.Normalize()], device="cpu")
    model.max_seq_length = a.max_length

    src_in = [(a.prefix + s).strip() for s in src]
    tgt_in = [(a.prefix + s).strip() for s in tgt]

    # Dense initialised like xsent's projection = "lstsq": ridge fit of the teacher's
    # vectors from the pooled (pre-Dense) student vectors of the source sentences.
    t0 = time.perf_counter()
    bare = SentenceTransformer(modules=[trans, pool], device="cpu")
    bare.eval()
    with torch.no_grad():
        pooled = bare.encode(src_in, batch_size=64, convert_to_numpy=True, show_progress_bar=False)
    w, b = fit_affine(pooled, target.numpy())
    with torch.no_grad():
        dense.linear.weight.copy_(torch.from_numpy(w))
        dense.linear.bias.copy_(torch.from_numpy(b))
    fit_s = time.perf_counter() - t0

    # sentence-transformers >= 6 calls it preprocess (tokenize: deprecated alias).
    tokenize = model.preprocess if hasattr(model, "preprocess") else model.tokenize

    # Shapes: every input exactly L tokens, no padding.
    fs, ft = tokenize(src_in), tokenize(tgt_in)
    shapes = [list(fs["input_ids"].shape), list(ft["input_ids"].shape)]
    pad_tokens = int((fs["attention_mask"] == 0).sum() + (ft["attention_mask"] == 0).sum())
    if a.expect_length is not None:
        want = [n, a.expect_length]
        if shapes != [want, want] or pad_tokens:
            sys.exit(f"bench: expected every input to be {a.expect_length} tokens ({want} twice, no "
                     f"padding), got shapes {shapes} with {pad_tokens} padding tokens")

    model.train()
    loss_fn = losses.MSELoss(model=model)
    mse = torch.nn.MSELoss()
    params = [p for p in model.parameters() if p.requires_grad]
    named = [(nm, p) for nm, p in model.named_parameters() if p.requires_grad]
    no_decay = [p for nm, p in named if nm.endswith(".bias") or "LayerNorm" in nm or "layer_norm" in nm]
    ids_nd = {id(p) for p in no_decay}
    decay = [p for _, p in named if id(p) not in ids_nd]
    # The implementation: "fused" is what SentenceTransformerTrainer gets (transformers'
    # default optim is adamw_torch_fused with torch >= 2.8); "for-loop" is torch's own
    # default on the CPU (AdamW() with no flags), "foreach" the multi-tensor one.
    impl = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[a.adamw]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-6, **impl)

    # The loss matches xsent's before timing: ST's MSELoss over [src; tgt] is the mean of
    # the two MSEs, so 2 x it is MSE(src) + MSE(tgt).
    with torch.no_grad():
        model.eval()
        es, et = model(dict(fs))["sentence_embedding"], model(dict(ft))["sentence_embedding"]
        want_loss = float(mse(es, target) + mse(et, target))
        got_loss = float(2.0 * loss_fn([dict(fs), dict(ft)], target))
        model.train()
    if abs(want_loss - got_loss) > 1e-6 * max(1.0, abs(want_loss)):
        sys.exit(f"bench: 2 x MSELoss = {got_loss} but MSE(src) + MSE(tgt) = {want_loss}")

    rows = []
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        feats = [tokenize(src_in), tokenize(tgt_in)]
        t_tok = time.perf_counter()
        loss = 2.0 * loss_fn(feats, target)
        loss_value = loss.item()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        gn = torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
        if step == 1:  # parameters that get a gradient (BertModel's unused pooler does not)
            n_params = sum(p.numel() for p in params if p.grad is not None)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if not np.isfinite(loss_value):
            sys.exit(f"bench: loss is {loss_value} at step {step}")
        rows.append({"step": step, "loss": loss_value, "grad_norm": float(gn),
                     "tokenize_s": t_tok - t0, "forward_s": t1 - t0, "backward_s": t2 - t1,
                     "optimizer_s": t3 - t2, "step_s": t3 - t0})

    out = summarise(rows, a.skip)
    out.update({
        "engine": "torch", "torch": torch.__version__, "loss_eval": want_loss,
        "sentence_transformers": sentence_transformers.__version__,
        "threads": torch.get_num_threads(), "adamw": a.adamw, "pairs": n, "shapes": shapes, "padding_tokens": pad_tokens,
        "params": n_params, "teacher_s": round(teacher_s, 3), "lstsq_s": round(fit_s, 3),
        "attn": getattr(getattr(getattr(trans, "auto_model", None) or getattr(trans, "model", None), "config", None),
                        "_attn_implementation", None),
    })
    print(json.dumps(out))


def summarise(rows, skip):
    timed = [r for r in rows if r["step"] > skip]
    if not timed:
        sys.exit(f"no steps after the first {skip}")
    out = {"steps": len(rows), "timed_steps": [r["step"] for r in timed]}
    for k in PHASES + ("tokenize_s",):
        if all(k in r for r in timed):
            out[k] = statistics.median(r[k] for r in timed)
    out["step_s_all"] = [round(r["step_s"], 4) for r in rows]
    out["loss_first"] = rows[0]["loss"]
    out["loss_last"] = rows[-1]["loss"]
    return out


def xsent_metrics(a):
    rows = []
    with open(a.metrics, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "loss" in r:
                rows.append(r)
    steps = [r["step"] for r in rows]
    if steps != list(range(1, a.steps + 1)):
        sys.exit(f"xsent-metrics: {a.metrics} logs steps {steps}, expected 1..{a.steps} (log_every = 1)")
    for r in rows:
        missing = [k for k in PHASES if k not in r]
        if missing:
            sys.exit(f"xsent-metrics: step {r['step']} of {a.metrics} has no {', '.join(missing)}")
    out = summarise(rows, a.skip)
    out["engine"] = "xsent"
    print(json.dumps(out))


def check_loss(a):
    """xsent's step-1 loss (a run with dropout off) against torch's loss of the same batch with
    dropout off before any update ("loss_eval"): prints "XSENT TORCH REL"; exit 2 when REL is
    above the tolerance (the engines did not compute the same thing)."""
    import math
    xl = None
    with open(a.metrics, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line) if line.strip() else {}
            if r.get("step") == 1 and "loss" in r:
                xl = float(r["loss"])
    tl = json.loads(a.torch).get("loss_eval")
    if xl is None or not isinstance(tl, (int, float)) or not all(map(math.isfinite, (xl, tl))) or tl <= 0:
        sys.exit(f"check-loss: no step-1 loss in {a.metrics} ({xl}) or no torch loss_eval ({tl})")
    rel = abs(xl - tl) / abs(tl)
    print(f"{xl!r} {tl!r} {rel!r}")
    if rel > a.tolerance:
        print(f"check-loss: the loss with dropout off differs: xsent {xl}, torch {tl}, relative {rel:.2g} > "
              f"{a.tolerance}: the engines did not compute the same step", file=sys.stderr)
        sys.exit(2)


# --------------------------------------------------------------- report --

def _valid(r, engine):
    """Every phase time a finite number above 0, or stop: no ratio from a failed run."""
    import math
    for k in PHASES:
        v = r.get(k)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            sys.exit(f"report: {engine}'s {k} is {v!r}, not a number above 0: no ratio from that run")
    return r


def _words(ratio):
    """A time ratio in words: below 1, xsent takes less time."""
    r = round(ratio, 2)
    return "faster" if r < 1 else "slower" if r > 1 else "the same to 2 places"


def report(a):
    xs = [_valid(json.loads(s), "xsent") for s in a.xsent]
    ts = [_valid(json.loads(s), "torch") for s in a.torch]
    x = min(xs, key=lambda r: r["step_s"])
    t = min(ts, key=lambda r: r["step_s"])
    info = json.loads(a.pairs_info)
    cores = min(float(c) for c in a.cores)
    tokens = 2 * a.batch * a.length
    rounds = f", best of {len(xs)} rounds" if len(xs) > 1 else ""
    print()
    print(f"xsent train vs sentence-transformers (torch {t['torch']}, CPU, {t['threads']} threads; "
          f"xsent XSENT_THREADS={a.threads}): one distillation step, batch {a.batch} pairs")
    print(f"batch: {a.batch} XNLI dev premises en + de, every student input \"query: \" + sentence exactly "
          f"{a.length} e5 tokens")
    print(f"       -> {2 * a.batch} inputs x {a.length} tokens = {tokens} tokens per step, max length {a.length}, "
          f"no padding in either engine (torch shapes {t['shapes'][0]} + {t['shapes'][1]}, "
          f"{t['padding_tokens']} pad tokens)")
    print(f"times: median of steps {a.skip + 1}..{a.steps} (of {a.steps}; first {a.skip} = warm-up){rounds}")
    print()
    hdr = ("engine", "step s", "forward s", "backward s", "optim s", "loss@1", f"loss@{a.steps}")
    print("%-18s | %8s | %9s | %10s | %8s | %8s | %8s" % hdr)
    print("-------------------+----------+-----------+------------+----------+----------+---------")
    for name, r in (("xsent", x), ("torch", t)):
        print("%-18s | %8.3f | %9.3f | %10.3f | %8.3f | %8.5f | %8.5f" % (
            name, r["step_s"], r["forward_s"], r["backward_s"], r["optimizer_s"], r["loss_first"], r["loss_last"]))
    ratio = {k: x[k] / t[k] for k in PHASES}
    print("%-18s | %7.2fx | %8.2fx | %9.2fx | %7.2fx |" % (
        "xsent ÷ torch time", ratio["step_s"], ratio["forward_s"], ratio["backward_s"], ratio["optimizer_s"]))
    print()
    print(f"xsent step times (s): {x['step_s_all']}")
    print(f"torch step times (s): {t['step_s_all']}")
    if len(xs) > 1:
        print(f"medians per round: xsent {[round(r['step_s'], 3) for r in xs]}, "
              f"torch {[round(r['step_s'], 3) for r in ts]}")
    verdict = "met" if ratio["step_s"] <= 1.0 else "NOT met"
    print(f"xsent {x['step_s']:.3f} s/step, torch {t['step_s']:.3f} s/step: xsent's step takes "
          f"{ratio['step_s']:.2f}x torch's time ({_words(ratio['step_s'])}; target <= 1.00x: {verdict})")
    print()
    print(f"forward = tokenise + forward + loss (both engines: xsent with train.ahead = false, so it tokenises "
          f"in its step; torch tokenise alone {t.get('tokenize_s', 0):.3f} s); "
          "backward = autograd; optim = global-norm clip + AdamW update + clearing the gradients.")
    print("xsent's forward and backward are thread-seconds summed over its shards (8 pairs each, run on "
          "separate cores), torch's are wall-clock with 2 intra-op threads: compare the step column.")
    print(f"parameters updated per step (torch): {t['params']:,}, word embeddings included; torch AdamW: "
          f"{t['adamw']}; torch attention: {t['attn']}; dropout on (train mode) in both.")
    print("loss@k: the step's training loss; the engines differ by dropout noise only (same data, teacher, "
          "lstsq-initialised Dense, constant lr 5e-5 from step 1).")
    if a.check_loss:
        xl, tl, rel = a.check_loss
        print(f"same computation: the loss of the batch before any update with dropout off, xsent {xl:.9g} "
              f"(step 1 of a run with distill.dropout = 0), torch {tl:.9g} (eval mode): relative difference "
              f"{rel:.2g} (at most 1e-4, checked after round 1, before any ratio)")
    flag = "  <-- fewer than 2 cores free: timings unreliable" if cores < 1.8 else ""
    print(f"machine: nproc {a.nproc}; cores free (busy-loop check) before {a.cores[0]}, after {a.cores[1]}{flag}; "
          f"load average (1/5/15 min) before {a.load[0]}, after {a.load[1]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("pick-pairs")
    k.add_argument("--xnli-dir", required=True)
    k.add_argument("--tokenizer", required=True)
    k.add_argument("--prefix", default="")
    k.add_argument("--max-length", type=int, default=128)
    k.add_argument("--n", type=int, default=32)
    k.add_argument("--out", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--student", required=True)
    b.add_argument("--teacher", required=True)
    b.add_argument("--pairs", required=True)
    b.add_argument("--prefix", default="")
    b.add_argument("--max-length", type=int, default=128)
    b.add_argument("--expect-length", type=int)
    b.add_argument("--steps", type=int, default=8)
    b.add_argument("--skip", type=int, default=2)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--lr", type=float, default=5e-5)
    b.add_argument("--weight-decay", type=float, default=0.01)
    b.add_argument("--max-grad-norm", type=float, default=1.0)
    b.add_argument("--adamw", choices=("fused", "foreach", "for-loop"), default="fused")
    m = sub.add_parser("xsent-metrics")
    m.add_argument("--metrics", required=True)
    m.add_argument("--steps", type=int, required=True)
    m.add_argument("--skip", type=int, default=2)
    r = sub.add_parser("report")
    r.add_argument("--xsent", nargs="+", required=True)
    r.add_argument("--torch", nargs="+", required=True)
    r.add_argument("--batch", type=int, required=True)
    r.add_argument("--length", type=int, required=True)
    r.add_argument("--steps", type=int, required=True)
    r.add_argument("--skip", type=int, required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--cores", nargs=2, required=True)
    r.add_argument("--load", nargs=2, required=True)
    r.add_argument("--nproc", required=True)
    r.add_argument("--pairs-info", required=True)
    r.add_argument("--check-loss", nargs=3, type=float, metavar=("XSENT", "TORCH", "REL"))
    c = sub.add_parser("check-loss")
    c.add_argument("--metrics", required=True)
    c.add_argument("--torch", required=True)
    c.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    {"pick-pairs": pick_pairs, "bench": bench, "xsent-metrics": xsent_metrics, "report": report,
     "check-loss": check_loss}[a.cmd](a)


if __name__ == "__main__":
    main()

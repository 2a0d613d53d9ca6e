#!/usr/bin/env python3
"""PyTorch / sentence-transformers side of scripts/bench-embed.sh.

Subcommands (run by bench-embed.sh; usable by hand too):

  make-cuda-stubs TORCH_DIR
      The only torch wheel for linux x86_64 on PyPI is the CUDA build, whose
      libraries (even libtorch_cpu.so) link against the multi-GB nvidia-*
      wheels.  bench-embed.sh installs that wheel with --no-deps; this command
      then builds tiny stand-in libraries (libcudart.so.13, libcublas.so.13,
      ...) in TORCH_DIR/lib with every symbol torch imports from them.  Every
      stand-in function returns 100 (cudaErrorNoDevice / CUDA_ERROR_NO_DEVICE),
      so torch sees "no GPU" and runs on its CPU kernels, which are the same
      code as in the CPU-only build.  Needs only the stdlib, readelf, ldd and gcc.

  bench --model DIR --input FILE --max-seq-length N [--prefix P]
        [--batch-size 64] [--threads 2] [--repeat 1] --out VECS.npy
      Encodes every line of FILE with SentenceTransformer(DIR, device="cpu"),
      after one warm-up encode of a few sentences; the timing covers the
      encode call only (model load excluded).  Saves the L2-normalised vectors
      (N x dim, float32, input order) and prints one JSON line.  P is passed
      as sentence-transformers' prompt: it replaces the model's default
      prompt, as xsent's --prefix does ("" = no prompt at all).

  cpu-check [--procs 2]
      Runs the same busy loop in 1 process, then in 2 at once, and prints how
      many cores' worth of CPU the 2 got (2.0 = two real cores, 1.0 = the
      cores are shared or throttled and a 2-thread timing means little).

  compare --torch VECS.npy --xsent OUT.f32
      Reads xsent's raw little-endian f32 rows, checks the shape and prints
      one JSON line with the min / mean cosine between the two engines'
      vectors for the same sentence.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# ---------------------------------------------------------------- stubs --

_ERROR_STRING = re.compile(r"(Error|Status)(String|Name)$")


def _run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _dyn_syms(path):
    """(undefined, defined) dynamic symbols of one ELF file.

    undefined: list of (name, version or None); weak ones left out."""
    und, defined = [], set()
    for line in _run(["readelf", "--dyn-syms", "-W", path]).splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":"):
            continue
        bind, ndx, name = f[4], f[6], f[7]
        base, _, ver = name.partition("@")
        ver = ver.lstrip("@") or None
        if ndx == "UND":
            if bind == "GLOBAL" and base:
                und.append((base, ver))
        else:
            defined.add(base)
    return und, defined


def _version_needs(path):
    """{version name: file it is needed from} for one ELF file."""
    needs, cur = {}, None
    for line in _run(["readelf", "-V", "-W", path]).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"Name: (\S+)\s+Flags", line)
        if m and cur:
            needs[m.group(1)] = cur
    return needs


def _ldd(path):
    """({soname: resolved path} of the found libraries, {missing sonames})."""
    found, missing = {}, set()
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (.*)", line)
        if not m:
            continue
        if "not found" in m.group(2):
            missing.add(m.group(1))
        else:
            found[m.group(1)] = m.group(2).split(" (")[0]
    return found, missing


def make_cuda_stubs(torch_dir):
    lib_dir = os.path.join(torch_dir, "lib")
    elfs = []
    for root, _dirs, files in os.walk(torch_dir):
        for fn in files:
            if re.search(r"\.so(\.\d+)*$", fn):
                elfs.append(os.path.join(root, fn))
    missing, found = set(), {}
    for p in elfs:
        fnd, mis = _ldd(p)
        missing |= mis
        found.update(fnd)
    if not missing:
        print("make-cuda-stubs: nothing missing, no stubs needed")
        return
    # Everything that some library already provides (torch's own, the
    # system's, libpython) must not be shadowed by a stub.
    provided = set()
    for p in elfs + sorted(set(found.values())):
        try:
            provided |= _dyn_syms(p)[1]
        except subprocess.CalledProcessError:
            pass
    versioned = {lib: {} for lib in missing}  # lib -> {version: {symbols}}
    unversioned = set()
    for p in elfs:
        und, _ = _dyn_syms(p)
        needs = _version_needs(p)
        for name, ver in und:
            if ver is None:
                if name not in provided and not name.startswith(("Py", "_Py")):
                    unversioned.add(name)
            elif needs.get(ver) in missing:
                versioned[needs[ver]].setdefault(ver, set()).add(name)
    all_names = set(unversioned)
    for vers in versioned.values():
        for syms in vers.values():
            all_names |= syms
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "stub.c")
        with open(src, "w") as f:
            f.write("/* CPU-only stand-ins for the CUDA libraries torch links to. */\n")
            f.write('static const char msg[] = "no CUDA: CPU-only stub library";\n')
            for name in sorted(all_names):
                if _ERROR_STRING.search(name):
                    f.write(f"const char *{name}(void) {{ return msg; }}\n")
                else:
                    f.write(f"int {name}(void) {{ return 100; }}\n")
        for lib in sorted(missing):
            vs = os.path.join(tmp, lib + ".map")
            with open(vs, "w") as f:
                for ver, syms in sorted(versioned[lib].items()):
                    f.write(f"{ver} {{ global: {'; '.join(sorted(syms))}; }};\n")
                if not versioned[lib]:
                    f.write("{ global: *; };\n")
            out = os.path.join(lib_dir, lib)
            _run(["gcc", "-shared", "-fPIC", "-O0", "-w", "-o", out, src,
                  f"-Wl,-soname,{lib}", f"-Wl,--version-script={vs}"])
            with open(os.path.join(lib_dir, "CUDA_STUBS.txt"), "a") as f:
                f.write(lib + "\n")
    print(f"make-cuda-stubs: {len(missing)} stub libraries, {len(all_names)} symbols, "
          f"in {lib_dir}: {' '.join(sorted(missing))}")


# ---------------------------------------------------------------- bench --

def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


_SPECIAL = {"pad_token": ("<pad>", "[PAD]"), "unk_token": ("<unk>", "[UNK]"),
            "cls_token": ("<s>", "[CLS]"), "sep_token": ("</s>", "[SEP]"),
            "mask_token": ("<mask>", "[MASK]"), "bos_token": ("<s>",), "eos_token": ("</s>",)}


def tokenizer_from_json(model_dir, max_len):
    """A tokenizer that is exactly the dir's tokenizer.json.

    Without a tokenizer_config.json transformers picks the tokenizer class
    from config.json's model_type ("bert" for multilingual-e5-small, whose
    tokenizer is really XLM-R's SentencePiece/Unigram one) and fails, so for
    such dirs the bench uses tokenizer.json as it is, like xsent does."""
    from transformers import PreTrainedTokenizerFast
    path = os.path.join(model_dir, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        added = {t["content"] for t in json.load(f).get("added_tokens", [])}
    special = {}
    for key, names in _SPECIAL.items():
        for n in names:
            if n in added:
                special[key] = n
                break
    return PreTrainedTokenizerFast(tokenizer_file=path, model_max_length=max_len, **special)


def setup_env(threads):
    """The torch side's environment, before torch or transformers is imported: THREADS
    OpenMP / MKL / Rayon threads, no tokenizer parallelism, Hugging Face offline and
    quiet.  Variables already set (bench-embed.sh and bench-train.sh export most of
    them) are kept.  Also used by bench_train_torch.py."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def bench(a):
    setup_env(a.threads)
    import numpy as np
    import transformers
    import torch
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    # The prefix goes in as sentence-transformers' `prompt`, which replaces the model's default
    # prompt (e5's setup.sh dir has "query: " as its default): prepended by hand, it was doubled.
    sents = read_lines(a.input)
    t0 = time.perf_counter()
    model = SentenceTransformer(a.model, device="cpu")
    tokenizer_note = "from tokenizer_config.json"
    if not os.path.exists(os.path.join(a.model, "tokenizer_config.json")):
        model[0].processor = tokenizer_from_json(a.model, a.max_seq_length)
        tokenizer_note = "tokenizer.json as is (dir has no tokenizer_config.json)"
    model.max_seq_length = a.max_seq_length
    load_s = time.perf_counter() - t0

    def encode(xs):
        return model.encode(xs, prompt=a.prefix, batch_size=a.batch_size, convert_to_numpy=True,
                            normalize_embeddings=True, show_progress_bar=False)

    encode(sents[:8])  # warm-up
    best = None
    for _ in range(max(1, a.repeat)):
        t0 = time.perf_counter()
        vecs = encode(sents)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    np.save(a.out, vecs)
    control = xsent_batching_control(a, model, sents, vecs) if a.control else {}
    print(json.dumps({**control,
        "engine": "torch", "torch": torch.__version__,
        "sentence_transformers": __import__("sentence_transformers").__version__,
        "threads": torch.get_num_threads(), "n": len(sents), "dim": int(vecs.shape[1]),
        "max_seq_length": model.max_seq_length, "batch_size": a.batch_size,
        "tokenizer": tokenizer_note, "prompt": a.prefix,
        "default_prompt_replaced": model.default_prompt_name,
        "load_s": round(load_s, 3), "encode_s": round(best, 4),
        "sent_per_s": round(len(sents) / best, 2),
    }))


def length_batches(lens, batch_size, max_tokens):
    """xsent's batching (src/model/sentence.rs::length_batches), over lengths sorted longest
    first: at most batch_size texts and max_tokens tokens padded, and a batch ends early when
    the next text would make its padding more than 10 % of its real tokens."""
    out, start, real = [], 0, 0
    for i, n_tok in enumerate(lens):
        n = i - start
        if n > 0 and (n == batch_size or lens[start] * (n + 1) > max_tokens
                      or 10 * lens[start] * (n + 1) > 11 * (real + n_tok)):
            out.append((start, i))
            start, real = i, 0
        real += n_tok
    if start < len(lens):
        out.append((start, len(lens)))
    return out


def xsent_batching_control(a, model, sents, st_vecs):
    """The control row: torch's forward on xsent's batches (texts sorted by token count, cut
    where padding would pass 10 %, at most --batch-size and 8,192 tokens), tokenising included,
    best of --repeat; so the ratio to it is kernels and threading alone, and the ratio to
    encode() adds the batching. Also the padding of both batchings (sentence-transformers':
    sorted by characters, fixed batches), and the lowest cosine to encode()'s vectors."""
    import numpy as np
    import torch
    tok = model[0].tokenizer
    texts = [a.prefix + x for x in sents]
    ids = tok(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
    lens = [len(x) for x in ids]

    def run():
        enc = tok(texts, truncation=True, max_length=model.max_seq_length)
        order = sorted(range(len(texts)), key=lambda i: -len(enc["input_ids"][i]))
        ls = [len(enc["input_ids"][i]) for i in order]
        out = np.zeros((len(texts), st_vecs.shape[1]), dtype=np.float32)
        with torch.inference_mode():
            for b0, b1 in length_batches(ls, a.batch_size, 8192):
                rows = order[b0:b1]
                feats = tok.pad({k: [enc[k][i] for i in rows] for k in enc.keys()}, return_tensors="pt")
                emb = model(dict(feats))["sentence_embedding"]
                emb = torch.nn.functional.normalize(emb, dim=-1)
                out[rows] = emb.float().numpy()
        return out

    run()  # warm-up
    best, vecs = None, None
    for _ in range(max(1, a.repeat)):
        t0 = time.perf_counter()
        vecs = run()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    cos = float(np.min(np.sum(vecs * st_vecs, axis=1)))
    order = sorted(range(len(texts)), key=lambda i: -lens[i])
    ls = [lens[i] for i in order]
    xb = length_batches(ls, a.batch_size, 8192)
    x_pad = sum(ls[b0] * (b1 - b0) for b0, b1 in xb) - sum(ls)
    st_order = sorted(range(len(sents)), key=lambda i: -len(texts[i]))  # encode(): by characters
    st_pad = sum(max(lens[i] for i in st_order[j:j + a.batch_size]) * len(st_order[j:j + a.batch_size])
                 for j in range(0, len(st_order), a.batch_size)) - sum(lens)
    return {"control_encode_s": round(best, 4), "control_sent_per_s": round(len(sents) / best, 2),
            "control_min_cos_to_encode": round(cos, 7), "control_batches": len(xb),
            "padding_pct_xsent_batching": round(100 * x_pad / sum(lens), 2),
            "padding_pct_encode": round(100 * st_pad / sum(lens), 2),
            "encode_batches": (len(sents) + a.batch_size - 1) // a.batch_size}


def _spin(q):
    t0 = time.perf_counter()
    x = 0
    for i in range(3_000_000):
        x += i
    q.put(time.perf_counter() - t0)


def cpu_check(a):
    import multiprocessing as mp
    q = mp.Queue()

    def run(k):
        ps = [mp.Process(target=_spin, args=(q,)) for _ in range(k)]
        t0 = time.perf_counter()
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        wall = time.perf_counter() - t0
        return wall, [q.get() for _ in ps]

    run(1)  # warm-up
    one = min(min(run(1)[1]) for _ in range(3))
    many = max(run(a.procs)[1])
    print(f"{a.procs * one / many:.2f}")


def compare(a):
    import numpy as np
    t = np.load(a.torch).astype(np.float64)
    raw = np.fromfile(a.xsent, dtype="<f4")
    n, dim = t.shape
    if raw.size != n * dim:
        sys.exit(f"compare: {a.xsent} holds {raw.size} floats, expected {n} x {dim} = {n * dim}")
    x = raw.reshape(n, dim).astype(np.float64)
    cos = (t * x).sum(1) / (np.linalg.norm(t, axis=1) * np.linalg.norm(x, axis=1))
    i = int(np.argmin(cos))
    print(json.dumps({
        "n": n, "dim": dim, "min_cos": float(cos[i]), "mean_cos": float(cos.mean()),
        "argmin": i, "max_abs_diff": float(np.abs(t - x).max()),
        "xsent_norm_min": float(np.linalg.norm(x, axis=1).min()),
        "xsent_norm_max": float(np.linalg.norm(x, axis=1).max()),
    }))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("make-cuda-stubs")
    s.add_argument("torch_dir")
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--input", required=True)
    b.add_argument("--max-seq-length", type=int, required=True)
    b.add_argument("--prefix", default="")
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--repeat", type=int, default=1)
    b.add_argument("--out", required=True)
    b.add_argument("--control", action="store_true",
                   help="also time torch's forward on xsent's batching (xsent_batching_control)")
    k = sub.add_parser("cpu-check")
    k.add_argument("--procs", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("--torch", required=True)
    c.add_argument("--xsent", required=True)
    a = p.parse_args()
    if a.cmd == "make-cuda-stubs":
        make_cuda_stubs(a.torch_dir)
    elif a.cmd == "cpu-check":
        cpu_check(a)
    elif a.cmd == "bench":
        bench(a)
    else:
        compare(a)


if __name__ == "__main__":
    main()

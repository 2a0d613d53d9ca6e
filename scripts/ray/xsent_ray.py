#!/usr/bin/env python3
"""Sharded embedding, IVF indexing and margin mining of two text files over a Ray cluster.

  xsent_ray.py --xsent BIN --model MODEL --src SRC.txt --tgt TGT.txt --work DIR -o MINED.tsv
               [--shards 8] [--address auto] [--k 4] [--nprobe 64] [--nlist N] [--codec f32]
               [--max-retries 3] [--threads 1] [-- EXTRA EMBED OPTIONS]

Ray schedules; xsent does the work: every task runs the xsent binary on one shard, with its
inputs and outputs in --work (on storage all nodes share). The steps, each waiting for the one
before it:

  1. embed      `xsent embed --shard i/N --out-dir WORK/{src,tgt}/emb --format npy` per side
                and shard (a shard whose manifest matches is skipped: resume).
  2. quantizer  `xsent index build --train-only` per side, on all its shards (the same sample
                rows as one file would give).
  3. index      `xsent index build --quantizer` per shard, ids offset by the rows of the shards
                before it (from the manifests).
  4. search     `xsent index search` per query shard, in every index shard of the other side.
  5. mine       `xsent mine --src-knn ... --tgt-knn ...`: margin scores, TSV to -o.

Each output is written under a temporary name and renamed; steps 2-5 record their command and
the size and modification time of each file it reads in `OUTPUT.done`, and are skipped when both
match, so a rerun of the driver resumes where it stopped and redoes what a changed input feeds. A task whose xsent fails or is killed is retried up to --max-retries times (Ray's
`max_retries` with `retry_exceptions`). The lines of SRC and TGT must be distinct and
non-blank (`awk 'NF && !seen[$0]++'`): row i of the vectors is line i.

Without --address the driver starts a local Ray on 127.0.0.1 (--local-cpus worker slots) and
stops it at the end; `--address auto` joins a running cluster (`ray start --head` ...). Task
logs are in WORK/logs/; while a task's xsent runs, its pid is in WORK/running/TASK.pid.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xsent", required=True, help="the xsent binary (on every node, same path)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--tgt", required=True)
    ap.add_argument("--work", required=True, help="shared folder for shards, indexes and logs")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray here)")
    ap.add_argument("--local-cpus", type=int, help="CPUs of the local Ray started without --address (default: all)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--nprobe", type=int, default=64)
    ap.add_argument("--nlist", type=int)
    ap.add_argument("--codec", default="f32", choices=["f32", "int8"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-retries", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="CPUs (and xsent threads) per task")
    ap.add_argument("embed_args", nargs="*", help="extra `xsent embed` options (after --)")
    return ap.parse_args()


def run_xsent(argv, log, pid_file, env_threads):
    """Run one xsent command; raise on failure (so Ray retries the task)."""
    env = dict(os.environ, XSENT_THREADS=str(env_threads), RAYON_NUM_THREADS=str(env_threads))
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env=env)
        if pid_file:
            with open(pid_file, "w") as f:
                f.write(str(proc.pid))
        rc = proc.wait()
        if pid_file and os.path.exists(pid_file):
            os.remove(pid_file)
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {rc} (log: {log})")
    return rc


def done_file(path):
    return path + ".done"


def inputs_of(argv, path):
    """The files the command reads (every existing file in argv but its output `path`, the xsent
    binary included), each with its size and modification time."""
    return {p: [os.stat(p).st_size, os.stat(p).st_mtime_ns] for p in argv if p != path and os.path.isfile(p)}


def is_done(path, argv):
    """Whether `path` was made by exactly this command from the files as they are now (its .done
    record matches the command and each input's size and modification time): a shard embedded
    again (another model, say) makes every step after it run again."""
    try:
        with open(done_file(path)) as f:
            rec = json.load(f)
        return rec["argv"] == argv and rec["inputs"] == inputs_of(argv, path) and os.path.exists(path)
    except (OSError, ValueError, KeyError):
        return False


def mark_done(path, argv):
    tmp = done_file(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"argv": argv, "inputs": inputs_of(argv, path), "time": time.time()}, f)
    os.replace(tmp, done_file(path))


def main():
    a = parse()
    import ray

    work = os.path.abspath(a.work)
    for d in ("logs", "running"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    xsent = os.path.abspath(a.xsent)
    if a.address:
        ray.init(address=a.address, logging_level="WARNING", log_to_driver=False)
    else:
        # A local cluster on 127.0.0.1, stopped with the driver.
        ray.init(num_cpus=a.local_cpus, _node_ip_address="127.0.0.1", include_dashboard=False, logging_level="WARNING", log_to_driver=False)

    @ray.remote(num_cpus=a.threads, max_retries=a.max_retries, retry_exceptions=True)
    def task(name, argv, output):
        """One xsent command; `output` (if any) is skipped when its .done record matches."""
        if output and is_done(output, argv):
            return f"{name}: done already"
        log = os.path.join(work, "logs", f"{name}.log")
        run_xsent(argv, log, os.path.join(work, "running", f"{name}.pid"), a.threads)
        if output:
            mark_done(output, argv)
        return f"{name}: ok"

    def wait(refs, step):
        t = time.time()
        for msg in ray.get(refs):
            print(f"xsent_ray: {msg}", file=sys.stderr)
        print(f"xsent_ray: {step} finished in {time.time() - t:.1f} s", file=sys.stderr)

    sides = {"src": os.path.abspath(a.src), "tgt": os.path.abspath(a.tgt)}
    n = a.shards
    stem = lambda i: f"shard-{i:05d}-of-{n:05d}"  # noqa: E731

    # 1. Embedding (xsent's manifests make a finished shard a no-op).
    refs = []
    for side, text in sides.items():
        for i in range(n):
            argv = [xsent, "embed", "--model", a.model, "--input", text, "--shard", f"{i}/{n}",
                    "--out-dir", f"{work}/{side}/emb", "--format", "npy", *a.embed_args]
            refs.append(task.remote(f"embed-{side}-{i}", argv, None))
    wait(refs, "embed")

    rows = {}
    for side in sides:
        rows[side] = []
        for i in range(n):
            with open(f"{work}/{side}/emb/{stem(i)}.manifest.json") as f:
                rows[side].append(json.load(f)["rows"])
    vectors = {s: [f"{work}/{s}/emb/{stem(i)}.npy" for i in range(n)] for s in sides}

    # 2. One quantizer per side, trained on a sample of all its shards.
    refs = []
    for side in sides:
        out = f"{work}/{side}/quantizer.ivf"
        argv = [xsent, "index", "build", "--train-only", "--vectors", *vectors[side], "-o", out,
                "--codec", a.codec, "--seed", str(a.seed)] + (["--nlist", str(a.nlist)] if a.nlist else [])
        refs.append(task.remote(f"quantizer-{side}", argv, out))
    wait(refs, "quantizer")

    # 3. One index per shard, with the shared quantizer and global ids.
    refs = []
    indexes = {s: [] for s in sides}
    for side in sides:
        os.makedirs(f"{work}/{side}/index", exist_ok=True)
        offset = 0
        for i in range(n):
            out = f"{work}/{side}/index/{stem(i)}.ivf"
            indexes[side].append(out)
            argv = [xsent, "index", "build", "--vectors", vectors[side][i], "--quantizer", f"{work}/{side}/quantizer.ivf",
                    "--id-offset", str(offset), "-o", out]
            refs.append(task.remote(f"index-{side}-{i}", argv, out))
            offset += rows[side][i]
    wait(refs, "index")

    # 4. Each query shard searched in all index shards of the other side.
    refs = []
    knn = {s: [] for s in sides}
    for side, other in (("src", "tgt"), ("tgt", "src")):
        os.makedirs(f"{work}/{side}/knn", exist_ok=True)
        for i in range(n):
            out = f"{work}/{side}/knn/{stem(i)}.npy"
            knn[side].append(out)
            argv = [xsent, "index", "search", "--index", *indexes[other], "--queries", vectors[side][i],
                    "-k", str(a.k), "--nprobe", str(a.nprobe), "-o", out]
            refs.append(task.remote(f"search-{side}-{i}", argv, out))
    wait(refs, "search")

    # 5. Margin scores over both sides' lists.
    out = os.path.abspath(a.output)
    argv = [xsent, "mine", "--src-file", sides["src"], "--tgt-file", sides["tgt"], "--src-knn", *knn["src"],
            "--tgt-knn", *knn["tgt"], "--k", str(a.k), "-o", out]
    wait([task.remote("mine", argv, out)], "mine")
    ray.shutdown()


if __name__ == "__main__":
    main()

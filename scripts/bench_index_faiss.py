#!/usr/bin/env python3
"""faiss side of scripts/bench-index.sh: approximate kNN for margin mining with faiss-cpu.

  bench_index_faiss.py --x X.npy --y Y.npy --truth DIR --kind ivfflat|ivfpq
                       [--k 4] [--nlist N] [--sample S] [--iterations I] [--nprobe 4,8,16]
                       [--pq-m 48] [--threads 2] [--seed 0]

Does what examples/bench_index.rs `ivf` does, with faiss: for y then x, trains an index
(IndexIVFFlat, or IndexIVFPQ with --pq-m sub-quantizers of 8 bits) on --sample random rows
(spherical k-means, --iterations, as xsent trains), adds all rows, and searches all rows of the
other side at each --nprobe. Inner product. Vectors are read from the .npy files in chunks of
65,536 rows (np.fromfile, no memory map), so peak RSS counts what faiss holds. Recall@k is
measured against DIR's exact lists (x_rows.npy, x2y.npy, y_rows.npy, y2x.npy from
`bench_index exact`). Prints one JSON line per nprobe.
"""
import argparse
import json
import math
import resource
import time

import numpy as np

CHUNK = 65536


def npy_info(path):
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        return shape, dtype, f.tell()


def read_rows(path, start, count):
    (n, d), dtype, off = npy_info(path)
    assert dtype == np.float32
    return np.fromfile(path, dtype=np.float32, count=count * d, offset=off + start * d * 4).reshape(count, d)


def chunks(path):
    (n, d), _, _ = npy_info(path)
    for s in range(0, n, CHUNK):
        yield s, read_rows(path, s, min(CHUNK, n - s))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--x", required=True)
    ap.add_argument("--y", required=True)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--kind", choices=["ivfflat", "ivfpq"], default="ivfflat")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--nlist", type=int)
    ap.add_argument("--sample", type=int)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--nprobe", default="16")
    ap.add_argument("--pq-m", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import faiss

    faiss.omp_set_num_threads(a.threads)
    nprobes = [int(v) for v in a.nprobe.split(",")]
    search_s = [0.0] * len(nprobes)
    hits = [0] * len(nprobes)
    total = 0
    train_s = build_s = 0.0
    index_mb = 0.0
    nlist_used = 0
    for db, queries, rows_file, truth_file in ((a.y, a.x, "x_rows.npy", "x2y.npy"), (a.x, a.y, "y_rows.npy", "y2x.npy")):
        (n, d), _, _ = npy_info(db)
        nlist = a.nlist or max(1, min(n, round(4 * math.sqrt(n))))
        nlist_used = nlist
        sample = min(n, a.sample or 40 * nlist)
        t0 = time.perf_counter()
        rng = np.random.default_rng(a.seed)
        rows = np.sort(rng.choice(n, size=sample, replace=False))
        mm = np.load(db, mmap_mode="r")
        train = np.ascontiguousarray(mm[rows], dtype=np.float32)
        del mm
        quantizer = faiss.IndexFlatIP(d)
        if a.kind == "ivfflat":
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexIVFPQ(quantizer, d, nlist, a.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
        index.cp.niter = a.iterations
        index.cp.spherical = True
        index.cp.seed = a.seed
        index.cp.max_points_per_centroid = max(256, math.ceil(sample / nlist))
        index.train(train)
        del train
        train_s += time.perf_counter() - t0
        for _, block in chunks(db):
            index.add(block)
        build_s += time.perf_counter() - t0
        per = d * 4 if a.kind == "ivfflat" else a.pq_m
        index_mb += (n * (per + 8) + nlist * d * 4) / 2**20
        want_rows = np.load(f"{a.truth}/{rows_file}")[:, 0]
        want = np.load(f"{a.truth}/{truth_file}")
        total += want.size
        (nq, _), _, _ = npy_info(queries)
        for i, nprobe in enumerate(nprobes):
            index.nprobe = nprobe
            ids = np.empty((nq, a.k), dtype=np.int64)
            t = time.perf_counter()
            for s, block in chunks(queries):
                _, ids[s : s + len(block)] = index.search(block, a.k)
            search_s[i] += time.perf_counter() - t
            got = ids[want_rows]
            hits[i] += sum(len(set(w) & set(g)) for w, g in zip(want.tolist(), got.tolist()))
        del index, quantizer
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for i, nprobe in enumerate(nprobes):
        print(json.dumps({"engine": f"faiss-{a.kind}", "faiss": faiss.__version__, "nlist": nlist_used, "nprobe": nprobe,
                          "iterations": a.iterations, "train_s": train_s, "build_s": build_s, "search_s": search_s[i],
                          "recall": hits[i] / total, "index_mb": index_mb, "threads": a.threads, "peak_rss_mb": peak}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Compare two run records (scripts/record.sh --check): the numbers of metrics.jsonl line by line
(relative 1e-5) and every score of the eval reports (absolute 0.01 on the ×100 scales). Prints a
table and exits 1 when anything differs beyond those bounds.

The bounds allow for a different CPU: gemm's AVX2 and AVX-512 kernels round differently, and
training amplifies that over hundreds of steps; on the machine that made the record the runs
agree exactly."""
import gzip
import json
import math
import pathlib
import sys


def load_jsonl(p):
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def numbers(obj, prefix=""):
    """Flatten a JSON value into {path: number}, skipping timings."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("_s") or k in ("seconds", "date", "items"):
                continue
            out.update(numbers(v, f"{prefix}.{k}" if prefix else k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(numbers(v, f"{prefix}[{i}]"))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix] = float(obj)
    return out


def main():
    ref, new = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    rows, bad = [], 0
    a, b = load_jsonl(ref / "metrics.jsonl"), load_jsonl(new / "metrics.jsonl")
    if a or b:
        worst, where = 0.0, ""
        if len(a) != len(b):
            bad += 1
            rows.append(("metrics.jsonl", f"{len(a)} lines vs {len(b)}", "DIFFERS"))
        for i, (x, y) in enumerate(zip(a, b)):
            nx, ny = numbers(x), numbers(y)
            for k in set(nx) | set(ny):
                u, v = nx.get(k, math.nan), ny.get(k, math.nan)
                rel = abs(u - v) / max(abs(u), 1e-12) if not (math.isnan(u) or math.isnan(v)) else math.inf
                if rel > worst:
                    worst, where = rel, f"line {i + 1} {k}: {u} vs {v}"
        ok = worst <= 1e-5
        bad += not ok
        rows.append(("metrics.jsonl", f"largest relative difference {worst:.2e} {where}", "ok" if ok else "DIFFERS"))
    for rep in sorted(ref.glob("eval-*.json.gz")):
        other = new / rep.name
        if not other.exists():
            bad += 1
            rows.append((rep.name, "missing in the new run", "DIFFERS"))
            continue
        x = json.loads(gzip.open(rep).read())
        y = json.loads(gzip.open(other).read())
        nx, ny = numbers({"results": x["results"], "extra": x.get("extra")}), numbers({"results": y["results"], "extra": y.get("extra")})
        worst, where = 0.0, ""
        for k in set(nx) | set(ny):
            u, v = nx.get(k, math.nan), ny.get(k, math.nan)
            d = abs(u - v) if not (math.isnan(u) or math.isnan(v)) else math.inf
            if d > worst:
                worst, where = d, f"{k}: {u} vs {v}"
        ok = worst <= 0.01
        bad += not ok
        rows.append((rep.name, f"largest difference {worst:.4f} {where}", "ok" if ok else "DIFFERS"))
    print(f"| {ref.name} | comparison | result |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

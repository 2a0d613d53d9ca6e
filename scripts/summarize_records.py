#!/usr/bin/env python3
"""One table of the headline records (docs/results/runs/NAME): each evaluation's main number with
its 95 % CI, and the paired difference against the record's base (from the `--compare` part of the
report) with its CI and p.

    python3 scripts/summarize_records.py [--runs docs/results/runs] NAME...

Numbers are read from the eval-*.json.gz reports; nothing is recomputed or rounded differently
from the tables in eval-*.md."""
import argparse
import gzip
import json
import os
import sys

# report name -> (column title, how to read the headline)
COLUMNS = [
    ("stsb-dev", "STS-B dev Spearman"),
    ("stsb", "STS-B dev+test Spearman"),
    ("sts17", "STS 2017 {m}, mean of 7 sets"),
    ("sts17-en", "STS 2017 {m} en-en"),
    ("sts17-x", "STS 2017 {m}, cross-lingual mean (ar-en, es-en, en-de)"),
    ("tatoeba", "Tatoeba accuracy, mean"),
    ("bucc", "BUCC zh-en F1"),
    ("xsr", "Multi30k XSR P@1, mean of 4"),
]


def fmt_ci(ci):
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


CROSS = ("ar-en", "es-en", "en-de")


def headline(name, rep, measure="spearman"):
    """(value, ci or None, note) of one report."""
    res = rep["results"]
    extra = rep.get("extra", {})
    if name in ("stsb-dev",):
        s = res[0]["scores"]
        return s["spearman"], s.get("spearman_ci95"), ""
    if name == "stsb":
        s = [r for r in res if "dev" in r.get("language", "") or "dev" in r.get("split", "")]
        s = (s or res)[0]["scores"]
        return s["spearman"], s.get("spearman_ci95"), "dev"
    if name.startswith("sts17"):
        by = {r["language"]: r["scores"] for r in res}
        if name == "sts17-en":
            return by["en-en"][measure], by["en-en"].get(f"{measure}_ci95"), ""
        keys = CROSS if name == "sts17-x" else list(by)
        vals = [by[k][measure] for k in keys]
        return sum(vals) / len(vals), None, f"{len(vals)} sets"
    if name == "tatoeba":
        return extra["average"], extra.get("average_ci95"), f"{extra['languages']} languages"
    if name == "bucc":
        s = res[0]["scores"]
        return s["f1"], s.get("f1_ci95"), ""
    if name == "xsr":
        return extra["mean_p_at_1"], extra.get("mean_p_at_1_ci95"), ""
    raise ValueError(name)


def difference(rep):
    cmp = rep.get("extra", {}).get("compare")
    if not cmp:
        return None
    rows = cmp["differences"]
    mean = [r for r in rows if r["language"].startswith("mean of")]
    row = (mean or rows)[-1] if (mean or len(rows) == 1) else None
    if row is None:
        return None
    d = row["difference"]
    return d["difference"], d["ci95"], d["p"], os.path.basename(os.path.dirname(cmp["against"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="docs/results/runs")
    ap.add_argument("--measure", default="spearman", choices=["spearman", "pearson"],
                    help="STS 2017's measure (seed 002 and 004 report Pearson)")
    ap.add_argument("names", nargs="+")
    a = ap.parse_args()
    m = a.measure.capitalize()
    file_of = lambda c: "sts17" if c.startswith("sts17") else c
    present = [(c, t.format(m=m)) for c, t in COLUMNS
               if any(os.path.exists(f"{a.runs}/{n}/eval-{file_of(c)}.json.gz") for n in a.names)]
    print("| record | " + " | ".join(t for _, t in present) + " |")
    print("|---|" + "---:|" * len(present))
    diffs = []
    for n in a.names:
        cells = []
        for c, _ in present:
            p = f"{a.runs}/{n}/eval-{file_of(c)}.json.gz"
            if not os.path.exists(p):
                cells.append("–")
                continue
            with gzip.open(p, "rt") as f:
                rep = json.load(f)
            v, ci, _ = headline(c, rep, a.measure)
            cells.append(f"{v:.2f} {fmt_ci(ci)}".strip())
            d = difference(rep) if c == file_of(c) else None
            if d:
                diffs.append((n, c, d))
        print(f"| {n} | " + " | ".join(cells) + " |")
    if diffs:
        print()
        print("| record | evaluation | base | difference | 95 % CI | p |")
        print("|---|---|---|---:|---:|---:|")
        for n, c, (d, ci, p, base) in diffs:
            print(f"| {n} | {c} | {base} | {d:+.2f} | {fmt_ci(ci)} | {p:.3f} |")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Approximate kNN for margin mining: xsent's IVF index against the exact search and faiss-cpu
# (IndexIVFFlat, IndexIVFPQ), side by side in one run, on the same vectors, 2 threads each.
#
# Margin mining needs each x's k best among y and each y's k best among x. Every engine here
# does that the same way: build an index of y (train on a sample + add all), search all of x;
# build an index of x, search all of y. Printed per engine and nprobe: recall@k against the
# exact lists, build and search seconds (both directions), peak RSS, and at the end the ratios
# at equal recall (the smallest nprobe of each engine that reaches --target recall), each said
# in words: "xsent-ivf-f32 takes 0.26x faiss-ivfflat's time (faster)" (below 1: xsent is faster).
# The "vs exact" column divides the exact search's estimated time (below) by each row's: it is
# an estimate too.
#
# usage: scripts/bench-index.sh [--n N] [--dim D] [--centres C] [--noise S] [--k K]
#                               [--nprobe 1,2,4,8,16,32,64,128] [--queries Q] [--nlist L]
#                               [--iterations I] [--target 0.95] [--seed S] [--no-faiss]
#                               [--faiss-kinds ivfflat,ivfpq] [--real]
#
#   --n        vectors per side (default 1000000; 1M x 384 float32 = 1.5 GB a side on disk,
#              and each engine holds one side's index at a time: ~2 GB peak)
#   --centres, --noise  the generator (default 10000 centres, noise 0.5), see below
#   --queries  exact ground truth for this many random queries of each side (default 2000)
#   --faiss-kinds  which faiss indexes to run (default both; IVFPQ takes long at 1M)
#   --real     instead of synthetic vectors: multilingual-e5-small vectors of the Tatoeba
#              sentences (x: the non-English sides, y: the English sides) and BUCC zh-en (x: zh,
#              y: en), each distinct line once; embedded once and cached in
#              $XSENT_CACHE/bench-index/. These are test sets: they are only measured here,
#              never used to choose settings (nlist 4 sqrt(n) and nprobe were chosen on the
#              synthetic vectors and XNLI, see docs/scale.md).
#
# Synthetic data (xsent::index::synthetic, seeded): C unit centres (Gaussian, normalised); each
# point is normalise(c + S * g / sqrt(dim)) for a uniformly drawn centre c and Gaussian g; x and
# y share the centres. At S = 0.5 a point's cosine with another point of its centre is ~0.8,
# with unrelated points ~0 +- 0.05.
#
# Exact search: at 1M x 1M it takes about an hour on 2 cores, so it is timed on the --queries
# sample of x (the same blocked GEMM search as knn_both) and scaled linearly to all of x: the
# line says "estimated". The same run gives the ground truth for recall.
#
# Training is the same for every engine: nlist (default 4 sqrt(n)) centroids, spherical k-means
# on 40 x nlist random vectors, --iterations (default 10). faiss IVFPQ: 48 sub-quantizers of 8
# bits (48 bytes a vector).
#
# Environment: XSENT_CACHE (default ~/.cache/xsent; the venv is $XSENT_CACHE/bench-venv, with
# numpy and faiss-cpu, installed when missing), BENCH_FAISS_VERSION (1.15.1), CARGO_TARGET_DIR,
# XSENT_MODELS and XSENT_DATA (for --real). Report the lscpu model and flags with the numbers;
# the script prints them and the load average.
set -euo pipefail
export LC_ALL=C
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

n=1000000 dim=384 centres=10000 noise=0.5 k=4 nprobe=1,2,4,8,16,32,64,128 queries=2000 nlist= iterations=10
target=0.95 seed=0 faiss=1 real= faiss_kinds=ivfflat,ivfpq
while [ $# -gt 0 ]; do
    case "$1" in
        --n|--dim|--centres|--noise|--k|--nprobe|--queries|--nlist|--iterations|--target|--seed)
            [ $# -ge 2 ] || { echo "bench-index: $1 needs a value" >&2; exit 64; }
            declare "${1#--}=$2"; shift 2 ;;
        --no-faiss) faiss=; shift ;;
        --faiss-kinds)
            [ $# -ge 2 ] || { echo "bench-index: $1 needs a value" >&2; exit 64; }
            faiss_kinds=$2; shift 2 ;;
        --real) real=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-index: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
# bench_provenance (the machine and the build with the numbers); say/die are this script's, below.
# shellcheck source=lib/bench-common.sh
. "$root/scripts/lib/bench-common.sh"
say() { printf 'bench-index: %s\n' "$*" >&2; }
die() { printf 'bench-index: error: %s\n' "$*" >&2; exit 1; }
for kind in ${faiss_kinds//,/ }; do
    case "$kind" in ivfflat|ivfpq) ;; *) die "--faiss-kinds: unknown kind $kind (ivfflat, ivfpq)" ;; esac
done

threads=2
export XSENT_THREADS=$threads RAYON_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
py="$cache/bench-venv/bin/python"
if [ ! -x "$py" ]; then
    python3 -m venv "$cache/bench-venv"
    "$py" -m pip install --quiet --disable-pip-version-check numpy
fi
if [ -n "$faiss" ] && ! "$py" -c 'import numpy, faiss' 2>/dev/null; then
    "$py" -m pip install --quiet --disable-pip-version-check numpy "faiss-cpu==${BENCH_FAISS_VERSION:-1.15.1}" || die "pip install faiss-cpu failed"
fi
say "building examples/bench_index and xsent"
(cd "$root" && cargo build --release --example bench_index && cargo build --release) >&2 || die "cargo build failed"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
bin="$target_dir/release/examples/bench_index"
xsent="$target_dir/release/xsent"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"

if [ -n "$real" ]; then
    data="${XSENT_DATA:-$root/../shared/data}"
    model="${XSENT_MODELS:-$root/models}/multilingual-e5-small"
    mkdir -p "$cache/bench-index"
    for side in x y; do
        txt="$work/$side.txt"
        if [ $side = x ]; then
            for f in "$data"/tatoeba/tatoeba.*-eng.*; do case "$f" in *.eng) ;; *) cat "$f" ;; esac; done > "$txt"
            cut -f2 "$data/bucc/zh-en.dev.zh" >> "$txt"
        else
            cat "$data"/tatoeba/tatoeba.*-eng.eng > "$txt"
            cut -f2 "$data/bucc/zh-en.dev.en" >> "$txt"
        fi
        awk '{ sub(/\r$/, "") } /[^ ]/ && !seen[$0]++' "$txt" > "$txt.u"
        key="$(sha256sum "$txt.u" | cut -c1-16)"
        vec="$cache/bench-index/e5-small-$key.npy"
        if [ ! -s "$vec" ]; then
            say "embedding $(wc -l < "$txt.u") distinct $side sentences with multilingual-e5-small (cached as $vec)"
            "$xsent" embed --model "$model" --input "$txt.u" --format npy -o "$vec" >&2
        fi
        ln -s "$vec" "$work/$side.npy"
    done
    what="multilingual-e5-small vectors of Tatoeba + BUCC zh-en ($(wc -l < "$work/x.txt.u") x $(wc -l < "$work/y.txt.u"))"
else
    say "generating 2 x $n clustered unit vectors of dim $dim ($centres centres, noise $noise, seed $seed)"
    "$bin" gen --n "$n" --dim "$dim" --centres "$centres" --noise "$noise" --seed "$seed" --x "$work/x.npy" --y "$work/y.npy" >&2
    what="$n x $n clustered unit vectors, dim $dim ($centres centres, noise $noise, seed $seed)"
fi

uptime_before="$(uptime)"
say "exact top-$k of $queries random queries a side"
"$bin" exact --x "$work/x.npy" --y "$work/y.npy" --k "$k" --queries "$queries" --seed "$seed" --truth "$work/truth" >> "$results"
for codec in f32 int8; do
    say "xsent IVF ($codec), nprobe $nprobe"
    "$bin" ivf --x "$work/x.npy" --y "$work/y.npy" --k "$k" --truth "$work/truth" --nprobe "$nprobe" --codec "$codec" \
        --iterations "$iterations" --seed "$seed" ${nlist:+--nlist "$nlist"} >> "$results"
done
if [ -n "$faiss" ]; then
    for kind in ${faiss_kinds//,/ }; do
        say "faiss $kind, nprobe $nprobe"
        "$py" "$root/scripts/bench_index_faiss.py" --x "$work/x.npy" --y "$work/y.npy" --k "$k" --truth "$work/truth" \
            --kind "$kind" --nprobe "$nprobe" --iterations "$iterations" --seed "$seed" --threads "$threads" ${nlist:+--nlist "$nlist"} >> "$results"
    done
fi
uptime_after="$(uptime)"

echo
echo "approximate kNN for margin mining (k $k, both directions), $threads threads each: $what"
bench_provenance "$bin" "$xsent"
echo "load average before: ${uptime_before##*load average: }; after: ${uptime_after##*load average: }"
"$py" - "$results" "$target" <<'EOF'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
target = float(sys.argv[2])
def pos(v, what):
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        sys.exit(f"bench-index: {what} is {v!r}, not a number above 0: no ratio from that run")
    return v
exact = next((r for r in rows if r["engine"] == "exact"), None)
if exact is None:
    sys.exit("bench-index: the exact search wrote no result")
ex = pos(exact["knn_both_estimate_s"], "the exact search's estimated time")
print(f"exact (knn_both, estimated from {exact['queries']} queries of x: {exact['x_sample_s']:.2f} s x {exact['nx']}/{exact['queries']}): {ex:.1f} s, peak RSS {exact['peak_rss_mb']:.0f} MB")
print()
print(f"{'engine':<16} {'nlist':>6} {'nprobe':>6} {'recall@k':>9} {'build s':>9} {'search s':>9} {'total s':>9} {'vs exact':>9} {'index MB':>9} {'peak RSS MB':>11}")
print(f"{'':<16} {'':>6} {'':>6} {'':>9} {'':>9} {'':>9} {'':>9} {'(est.)':>9}")
best = {}
for r in rows:
    if r["engine"] == "exact":
        continue
    tot = pos(r["build_s"] + r["search_s"], f"{r['engine']} nprobe {r.get('nprobe')}'s time")
    print(f"{r['engine']:<16} {r['nlist']:>6} {r['nprobe']:>6} {r['recall']:>9.4f} {r['build_s']:>9.1f} {r['search_s']:>9.1f} {tot:>9.1f} {ex / tot:>8.1f}x {r['index_mb']:>9.0f} {r['peak_rss_mb']:>11.0f}")
    if r["recall"] >= target and (r["engine"] not in best or tot < best[r["engine"]][0]):
        best[r["engine"]] = (tot, r)
print()
print(f"at recall@k >= {target} (fastest setting of each engine that reaches it):")
for e, (tot, r) in sorted(best.items(), key=lambda kv: kv[1][0]):
    print(f"  {e:<16} nprobe {r['nprobe']:>3}: {tot:8.1f} s (build {r['build_s']:.1f} + search {r['search_s']:.1f}), {ex / tot:.1f}x faster than exact (estimated)")
for e in sorted({r['engine'] for r in rows} - set(best) - {"exact"}):
    top = max((r for r in rows if r["engine"] == e), key=lambda r: r["recall"])
    print(f"  {e:<16} does not reach it (best recall {top['recall']:.4f} at nprobe {top['nprobe']})")
if "xsent-ivf-f32" in best:
    x = best["xsent-ivf-f32"][0]
    for e in ("faiss-ivfflat", "faiss-ivfpq"):
        if e in best:
            q = round(x / best[e][0], 2)
            words = "faster" if q < 1 else "slower" if q > 1 else "the same to 2 places"
            print(f"  xsent-ivf-f32 takes {q:.2f}x {e}'s time ({words})")
EOF

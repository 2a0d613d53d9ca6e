#!/usr/bin/env bash
# Margin-mining kNN: xsent vs faiss-cpu IndexFlatIP on the same random unit
# vectors. Margin mining (`xsent mine`, BUCC scoring) needs the exact top-k by
# inner product from every x among Y and from every y among X. xsent computes
# both in one blocked pass (xsent::index::knn::knn_both: each block of x.y^T is
# computed once and feeds a running top-k for its rows and for its columns).
# faiss runs two searches, IndexFlatIP over Y searched with X and over X
# searched with Y, as LASER's mine_bitexts does with faiss. Same data, same
# k, 2 threads each, one after the other, for several sizes (N x N). Prints
# seconds of each, the ratio and how often the engines pick the same best
# neighbour.
#
# usage: scripts/bench-mine.sh [--sizes N,N,...] [--dim D] [--k K] [--repeat R]
#                              [--seed S] [--two-pass]
#
#   --sizes     vectors per side, one run each (default 1000,10000,100000)
#   --dim       dimension (default 384)
#   --k         neighbours per query (default 4)
#   --repeat    time each engine R times and keep the best (default: 5 for
#               sizes up to 10000, 1 above)
#   --seed      seed of the random vectors (default 0)
#   --two-pass  also time xsent's one-direction knn twice (knn(x,y) + knn(y,x),
#               the way before knn_both) and check it gives the same lists
#
# examples/bench_knn.rs makes the two sets of N random unit vectors (Gaussian,
# normalised), writes them as float32 .npy to a temp dir (removed at the end),
# and times knn_both(x, y, k); then scripts/bench_mine_faiss.py times
# faiss.IndexFlatIP (add + search) both ways on the same files and compares the
# top-1 neighbours. Data generation and file I/O are not timed.
#
# The "cores" line is how many cores' worth of CPU 2 busy processes got just
# before and after the runs (the lower of the two); below ~1.8 the machine was
# not giving 2 cores and the timings are not reliable.
#
# Environment:
#   XSENT_CACHE          cache dir (default ~/.cache/xsent); the Python venv is
#                        $XSENT_CACHE/bench-venv (shared with bench-embed.sh):
#                        created with numpy if absent, faiss-cpu installed into
#                        it if `import faiss` fails
#   BENCH_FAISS_VERSION  faiss-cpu version to install (default 1.15.1)
#   CARGO_TARGET_DIR     where cargo builds (default <repo>/target)
#
# Exit status 2 if the engines disagree on a best neighbour by more than a tie
# (cosines within 1e-5 in float64).
set -euo pipefail
export LC_ALL=C

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helper="$root/scripts/bench_mine_faiss.py"

sizes=1000,10000,100000
dim=384
k=4
repeat=
seed=0
two_pass=
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes|--dim|--k|--repeat|--seed)
            [ $# -ge 2 ] || { echo "bench-mine: $1 needs a value" >&2; exit 64; }
            declare "${1#--}=$2"; shift 2 ;;
        --sizes=*|--dim=*|--k=*|--repeat=*|--seed=*)
            a="${1#--}"; declare "${a%%=*}=${a#*=}"; shift ;;
        --two-pass) two_pass=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-mine: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
[[ "$sizes" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench-mine: --sizes must be positive integers separated by commas (got '$sizes')" >&2; exit 64; }
for v in dim k; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "bench-mine: --$v must be a positive integer (got '${!v}')" >&2; exit 64; }
done
[ -z "$repeat" ] || [[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "bench-mine: --repeat must be a positive integer (got '$repeat')" >&2; exit 64; }
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "bench-mine: --seed must be a non-negative integer" >&2; exit 64; }
IFS=, read -r -a ns <<< "$sizes"
for n in "${ns[@]}"; do
    [ "$k" -le "$n" ] || { echo "bench-mine: --k must be at most every size (got k $k, size $n)" >&2; exit 64; }
done

say() { printf 'bench-mine: %s\n' "$*" >&2; }
die() { printf 'bench-mine: error: %s\n' "$*" >&2; exit 1; }

threads=2
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
venv="$cache/bench-venv"
py="$venv/bin/python"
faiss_version="${BENCH_FAISS_VERSION:-1.15.1}"

# Both engines get the same thread limits (xsent: XSENT_THREADS workers, one
# single-threaded GEMM block each; faiss: OpenMP threads, BLAS under it).
export XSENT_THREADS=$threads RAYON_NUM_THREADS=$threads
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

# ---- xsent example ----------------------------------------------------------
say "building examples/bench_knn (cargo build --release --example bench_knn)"
(cd "$root" && cargo build --release --example bench_knn) >&2 || die "cargo build failed"
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench_knn"
[ -x "$bin" ] || die "no binary at $bin after the build"

# ---- Python venv with numpy and faiss-cpu -----------------------------------------
if [ ! -x "$py" ]; then
    command -v python3 >/dev/null || die "python3 is needed for the faiss side"
    say "creating $venv (numpy)"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$py" -m pip install --quiet --disable-pip-version-check numpy || die "pip install numpy failed"
fi
if ! "$py" -c 'import numpy, faiss' 2>/dev/null; then
    say "installing faiss-cpu==$faiss_version into $venv"
    "$py" -m pip install --quiet --disable-pip-version-check numpy "faiss-cpu==$faiss_version" \
        || die "pip install faiss-cpu==$faiss_version failed"
    "$py" -c 'import numpy, faiss' || die "faiss still does not import from $venv"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
json_field() { "$py" -c 'import json, sys; v = json.loads(sys.argv[1])[sys.argv[2]]; print("" if v is None else v)' "$1" "$2"; }

# ---- run --------------------------------------------------------------------------
cores_before="$("$py" "$helper" --cpu-check)"
rows=()
mismatches=0
for n in "${ns[@]}"; do
    r="${repeat:-$([ "$n" -le 10000 ] && echo 5 || echo 1)}"
    say "N = $n: xsent: 2 x $n random unit vectors of dim $dim (seed $seed), knn_both (k $k), best of $r"
    xj="$("$bin" --gen --n "$n" --dim "$dim" --k "$k" --seed "$seed" --repeat "$r" ${two_pass:+--two-pass} \
        --x "$work/x.npy" --y "$work/y.npy" --out "$work/xsent" | tail -n 1)" || die "bench_knn failed"
    say "xsent: $xj"
    say "N = $n: faiss: IndexFlatIP x->y and y->x (k $k), best of $r"
    fj="$("$py" "$helper" --x "$work/x.npy" --y "$work/y.npy" --k "$k" --threads "$threads" \
        --repeat "$r" --xsent "$work/xsent" | tail -n 1)" || die "faiss benchmark failed"
    say "faiss: $fj"
    rows+=("$n $r $(json_field "$xj" seconds) $(json_field "$fj" seconds) $(json_field "$fj" x2y_s) $(json_field "$fj" y2x_s) $(json_field "$fj" top1_agree) $(json_field "$fj" top1_real_mismatch) $(json_field "$xj" two_pass_s)")
    mismatches=$((mismatches + $(json_field "$fj" top1_real_mismatch)))
    fv="$(json_field "$fj" faiss)"
    rm -rf "$work"/*
done
cores_after="$("$py" "$helper" --cpu-check)"

echo
echo "margin kNN (x->y and y->x, exact inner product, k $k, dim $dim): xsent knn_both vs faiss-cpu $fv IndexFlatIP, $threads threads each"
if [ -n "$two_pass" ]; then
    printf '%9s | %7s | %11s | %11s | %7s | %11s | %10s\n' "N x N" "best of" "xsent s" "faiss s" ratio "xsent 2-pass s" "top-1 same"
    printf -- '----------+---------+-------------+-------------+---------+----------------+-----------\n'
else
    printf '%9s | %7s | %11s | %11s | %7s | %10s\n' "N x N" "best of" "xsent s" "faiss s" ratio "top-1 same"
    printf -- '----------+---------+-------------+-------------+---------+-----------\n'
fi
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086
    set -- $row
    awk -v n="$1" -v r="$2" -v xs="$3" -v fs="$4" -v ag="$7" -v tp="${9:-}" 'BEGIN {
        if (tp == "") printf "%9d | %7d | %11.4f | %11.4f | %6.2fx | %9.4f%%\n", n, r, xs, fs, fs / xs, 100 * ag
        else printf "%9d | %7d | %11.4f | %11.4f | %6.2fx | %14.4f | %9.4f%%\n", n, r, xs, fs, fs / xs, tp, 100 * ag }'
done
echo
echo "xsent s: knn_both(x, y, k), one blocked pass that yields both directions (what xsent mine and"
echo "  eval bucc run). faiss s: IndexFlatIP over y searched with x, plus IndexFlatIP over x searched"
echo "  with y (add + search, twice): faiss has no search that returns both directions, and this is how"
echo "  LASER's mine_bitexts uses it. So xsent computes the N x N similarities once, faiss twice."
[ -z "$two_pass" ] || echo "xsent 2-pass s: knn(x, y) + knn(y, x), xsent's one-direction search twice (same lists as knn_both, checked)."
echo "ratio = faiss seconds / xsent seconds (above 1.00x: xsent is faster)."
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086
    set -- $row
    awk -v n="$1" -v d="$dim" -v xs="$3" -v f1="$5" -v f2="$6" 'BEGIN {
        f = 2.0 * n * n * d; printf "N %d: one N x N product = %.1f GFLOP; xsent %.0f GFLOP/s for one product, faiss %.0f GFLOP/s per search (x->y %.3f s, y->x %.3f s).\n", n, f / 1e9, f / xs / 1e9, 2 * f / (f1 + f2) / 1e9, f1, f2 }'
done
echo "top-1 same: share of the 2N queries whose best neighbour is the same in both engines;"
echo "  differing picks that are not ties (|cos difference| > 1e-5): $mismatches."
awk -v c1="$cores_before" -v c2="$cores_after" 'BEGIN { c = (c1 < c2) ? c1 : c2;
    printf "cores: %.2f (CPU 2 busy processes got around the runs; 2.00 = two free cores)%s\n", c, (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }'
[ "$mismatches" = 0 ] || exit 2

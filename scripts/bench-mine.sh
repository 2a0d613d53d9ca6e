#!/usr/bin/env bash
# Margin-mining kNN: xsent vs faiss-cpu IndexFlatIP on the same random unit
# vectors. Both do what `xsent mine` / BUCC scoring needs: exact top-k by inner
# product from x to y and from y to x (N x N each way), 2 threads each, run one
# after the other. Prints seconds of each, the ratio and how often the two
# engines pick the same best neighbour.
#
# usage: scripts/bench-mine.sh [--n N] [--dim D] [--k K] [--repeat R] [--seed S]
#
#   --n       vectors per side (default 100000)
#   --dim     dimension (default 384)
#   --k       neighbours per query (default 4)
#   --repeat  time each engine R times and keep the best (default 1)
#   --seed    seed of the random vectors (default 0)
#
# examples/bench_knn.rs makes the two sets of N random unit vectors (Gaussian,
# normalised), writes them as float32 .npy to a temp dir (removed at the end),
# and times xsent::eval::knn::knn(x, y, k) + knn(y, x, k); then
# scripts/bench_mine_faiss.py times faiss.IndexFlatIP (add + search) both ways
# on the same files and compares the top-1 neighbours. Data generation and file
# I/O are not timed.
#
# The "cores" column is how many cores' worth of CPU 2 busy processes got just
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

n=100000
dim=384
k=4
repeat=1
seed=0
while [ $# -gt 0 ]; do
    case "$1" in
        --n|--dim|--k|--repeat|--seed)
            [ $# -ge 2 ] || { echo "bench-mine: $1 needs a value" >&2; exit 64; }
            declare "${1#--}=$2"; shift 2 ;;
        --n=*|--dim=*|--k=*|--repeat=*|--seed=*)
            a="${1#--}"; declare "${a%%=*}=${a#*=}"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-mine: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
for v in n dim k repeat; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "bench-mine: --$v must be a positive integer (got '${!v}')" >&2; exit 64; }
done
[ "$k" -le "$n" ] || { echo "bench-mine: --k must be at most --n" >&2; exit 64; }
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "bench-mine: --seed must be a non-negative integer" >&2; exit 64; }

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
json_field() { "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# ---- run --------------------------------------------------------------------------
cores_before="$("$py" "$helper" --cpu-check)"
say "xsent: generating 2 x $n random unit vectors of dim $dim (seed $seed), then knn both ways (k $k)"
xj="$("$bin" --gen --n "$n" --dim "$dim" --k "$k" --seed "$seed" --repeat "$repeat" \
    --x "$work/x.npy" --y "$work/y.npy" --out "$work/xsent" | tail -n 1)" || die "bench_knn failed"
say "xsent: $xj"
say "faiss: IndexFlatIP both ways (k $k)"
fj="$("$py" "$helper" --x "$work/x.npy" --y "$work/y.npy" --k "$k" --threads "$threads" \
    --repeat "$repeat" --xsent "$work/xsent" | tail -n 1)" || die "faiss benchmark failed"
say "faiss: $fj"
cores_after="$("$py" "$helper" --cpu-check)"

xs="$(json_field "$xj" seconds)"
fs="$(json_field "$fj" seconds)"
agree="$(json_field "$fj" top1_agree)"
real_mismatch="$(json_field "$fj" top1_real_mismatch)"
fv="$(json_field "$fj" faiss)"

echo
echo "margin kNN, x->y and y->x, exact inner product: xsent vs faiss-cpu $fv IndexFlatIP, $threads threads each, best of $repeat"
printf '%8s | %5s | %3s | %9s | %9s | %7s | %10s | %s\n' n dim k "xsent s" "faiss s" ratio "top-1 same" cores
printf -- '---------+-------+-----+-----------+-----------+---------+------------+------\n'
awk -v n="$n" -v d="$dim" -v k="$k" -v xs="$xs" -v fs="$fs" -v ag="$agree" -v c1="$cores_before" -v c2="$cores_after" 'BEGIN {
    c = (c1 < c2) ? c1 : c2
    printf "%8d | %5d | %3d | %9.3f | %9.3f | %6.2fx | %9.4f%% | %.2f%s\n", n, d, k, xs, fs, fs / xs, 100 * ag, c,
        (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }'
echo
echo "seconds: both directions, search only (xsent: knn(x, y) + knn(y, x); faiss: IndexFlatIP add + search, twice)."
echo "ratio = faiss seconds / xsent seconds (above 1.00x: xsent is faster)."
awk -v n="$n" -v d="$dim" -v xs="$xs" -v fs="$fs" 'BEGIN {
    f = 2.0 * n * n * d * 2; printf "GEMM-equivalent rate (2*N*N*D*2 FLOP / seconds): xsent %.0f GFLOP/s, faiss %.0f GFLOP/s.\n", f / xs / 1e9, f / fs / 1e9 }'
echo "top-1 same: share of the 2N queries whose best neighbour is the same in both engines;"
echo "  differing picks that are not ties (|cos difference| > 1e-5): $real_mismatch."
echo "cores: CPU 2 busy processes got around the runs (2.00 = two free cores)."
[ "$real_mismatch" = 0 ] || exit 2

#!/usr/bin/env bash
# Margin-mining kNN: xsent vs faiss-cpu IndexFlatIP on the same random unit
# vectors. Margin mining (`xsent mine`, BUCC scoring) needs the exact top-k by
# inner product from every x among Y and from every y among X. xsent computes
# both in one blocked pass (xsent::index::knn::knn_both: each block of x.y^T is
# computed once and feeds a running top-k for its rows and for its columns).
# faiss runs two searches, IndexFlatIP over Y searched with X and over X
# searched with Y, as LASER's mine_bitexts does with faiss. Same data, same
# k, 2 threads each, one after the other, for several sizes (N x N). Prints
# seconds of each, the ratio, and how well the engines' k neighbours agree.
#
# Ratio: faiss seconds ÷ xsent seconds (above 1: xsent is faster), said in words.
# The headline ratio includes an algorithmic saving: xsent computes the N x N
# product once for both directions, faiss twice. With --two-pass the script also
# prints the per-product ratio (faiss ÷ xsent's one-direction knn run twice: two
# products each), which measures the kernels alone.
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
# faiss.IndexFlatIP (add + search) both ways on the same files and compares all
# k neighbours of every query (recall@k against faiss, ties allowed; top-1 agreement).
# Data generation and file I/O are not timed.
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
#   BENCH_KNN_BIN        a built examples/bench_knn to run instead of building this
#                        checkout's (the output names the binary either way)
#
# Exit status 2 if the engines disagree on any of the k neighbours of a query by
# more than a tie (at some rank the two picks' cosines, in float64, differ by more
# than 1e-5; or xsent lists an id twice). Exit 1 when a side fails or prints a
# value that is not a number.
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

# bench_provenance, bench_num/bench_pos and the ratio words; say/die are this script's, below.
# shellcheck source=lib/bench-common.sh
. "$root/scripts/lib/bench-common.sh"
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
if [ -n "${BENCH_KNN_BIN:-}" ]; then
    bin="$BENCH_KNN_BIN"
    [ -x "$bin" ] || die "BENCH_KNN_BIN=$bin is not an executable"
else
    say "building examples/bench_knn (cargo build --release --example bench_knn)"
    (cd "$root" && cargo build --release --example bench_knn) >&2 || die "cargo build failed"
    bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench_knn"
    [ -x "$bin" ] || die "no binary at $bin after the build"
fi

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
cores_before="$("$py" "$helper" --cpu-check)" || die "the core check failed"
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
    # Every value the table uses, read and checked here: no ratio from a failed or odd run.
    xs="$(json_field "$xj" seconds)" || die "no seconds in bench_knn's output: $xj"
    fsec="$(json_field "$fj" seconds)" || die "no seconds in the faiss output: $fj"
    f1="$(json_field "$fj" x2y_s)" && f2="$(json_field "$fj" y2x_s)" || die "no per-search seconds in the faiss output: $fj"
    ag="$(json_field "$fj" top1_agree)" && rk="$(json_field "$fj" recall_at_k)" \
        && mm="$(json_field "$fj" topk_real_mismatch)" || die "no neighbour comparison in the faiss output: $fj"
    tp=""
    [ -z "$two_pass" ] || { tp="$(json_field "$xj" two_pass_s)" || die "no two_pass_s in bench_knn's output: $xj"; bench_pos "N $n: xsent 2-pass seconds" "$tp"; }
    bench_pos "N $n: xsent seconds" "$xs"
    bench_pos "N $n: faiss seconds" "$fsec"
    bench_pos "N $n: faiss x->y seconds" "$f1"
    bench_pos "N $n: faiss y->x seconds" "$f2"
    bench_num "N $n: top-1 agreement" "$ag"
    bench_num "N $n: recall@k" "$rk"
    [[ "$mm" =~ ^[0-9]+$ ]] || die "N $n: the count of real mismatches is '$mm', not a count"
    rows+=("$n $r $xs $fsec $f1 $f2 $ag $mm $rk $tp")
    mismatches=$((mismatches + mm))
    fv="$(json_field "$fj" faiss)"
    rm -rf "$work"/*
done
cores_after="$("$py" "$helper" --cpu-check)" || die "the core check failed"
bench_num "core check" "$cores_before"
bench_num "core check" "$cores_after"

echo
echo "margin kNN (x->y and y->x, exact inner product, k $k, dim $dim): xsent knn_both vs faiss-cpu $fv IndexFlatIP, $threads threads each"
bench_provenance "$bin"
echo "load average: $(bench_load)"
if [ -n "$two_pass" ]; then
    printf '%9s | %7s | %11s | %11s | %18s | %14s | %18s | %10s | %10s\n' "N x N" "best of" "xsent s" "faiss s" "faiss/xsent (incl." "xsent 2-pass s" "faiss/xsent 2-pass" "recall@k" "top-1 same"
    printf '%9s | %7s | %11s | %11s | %18s | %14s | %18s | %10s | %10s\n' "" "" "" "" "1-product saving)" "" "(per product)" "(ties ok)" ""
    printf -- '----------+---------+-------------+-------------+--------------------+----------------+--------------------+------------+-----------\n'
else
    printf '%9s | %7s | %11s | %11s | %18s | %10s | %10s\n' "N x N" "best of" "xsent s" "faiss s" "faiss/xsent (incl." "recall@k" "top-1 same"
    printf '%9s | %7s | %11s | %11s | %18s | %10s | %10s\n' "" "" "" "" "1-product saving)" "(ties ok)" ""
    printf -- '----------+---------+-------------+-------------+--------------------+------------+-----------\n'
fi
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086
    set -- $row
    awk -v n="$1" -v r="$2" -v xs="$3" -v fs="$4" -v ag="$7" -v rk="$9" -v tp="${10:-}" 'BEGIN {
        if (tp == "") printf "%9d | %7d | %11.4f | %11.4f | %17.2fx | %10.6f | %9.4f%%\n", n, r, xs, fs, fs / xs, rk, 100 * ag
        else printf "%9d | %7d | %11.4f | %11.4f | %17.2fx | %14.4f | %17.2fx | %10.6f | %9.4f%%\n", n, r, xs, fs, fs / xs, tp, fs / tp, rk, 100 * ag }'
done
echo
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086
    set -- $row
    one="$(awk -v a="$4" -v b="$3" 'BEGIN { printf "%.2f", a / b }')"
    line="N $1: faiss takes ${one}× xsent knn_both's time: xsent $(bench_rate_words "$one"), including the saving of computing the product once"
    if [ -n "${10:-}" ]; then
        two="$(awk -v a="$4" -v b="${10}" 'BEGIN { printf "%.2f", a / b }')"
        line="$line; per product (xsent's knn twice) faiss takes ${two}× xsent's time ($(bench_rate_words "$two"))"
    fi
    echo "$line"
done
echo
echo "xsent s: knn_both(x, y, k), one blocked pass that yields both directions (what xsent mine and"
echo "  eval bucc run). faiss s: IndexFlatIP over y searched with x, plus IndexFlatIP over x searched"
echo "  with y (add + search, twice): faiss has no search that returns both directions, and this is how"
echo "  LASER's mine_bitexts uses it. So xsent computes the N x N similarities once, faiss twice."
[ -z "$two_pass" ] || echo "xsent 2-pass s: knn(x, y) + knn(y, x), xsent's one-direction search twice (same lists as knn_both, checked)."
echo "faiss/xsent = faiss seconds / xsent seconds (above 1.00x: xsent is faster). The first such column includes"
echo "  xsent's algorithmic saving (one N x N product for both directions, faiss two)."
if [ -n "$two_pass" ]; then
    echo "faiss/xsent 2-pass: against xsent's one-direction knn run twice, two products on each side (the kernels alone)."
else
    echo "  --two-pass adds the per-product ratio (two products on each side)."
fi
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086
    set -- $row
    awk -v n="$1" -v d="$dim" -v xs="$3" -v f1="$5" -v f2="$6" 'BEGIN {
        f = 2.0 * n * n * d; printf "N %d: one N x N product = %.1f GFLOP; xsent %.0f GFLOP/s for one product, faiss %.0f GFLOP/s per search (x->y %.3f s, y->x %.3f s).\n", n, f / 1e9, f / xs / 1e9, 2 * f / (f1 + f2) / 1e9, f1, f2 }'
done
echo "recall@k: share of xsent's k neighbours that faiss lists too, a neighbour counted when its cosine is within"
echo "  1e-5 of faiss's k-th (a tie); top-1 same: share of the 2N queries whose best neighbour is the same."
echo "queries whose k neighbours differ from faiss's beyond ties (at some rank |cos difference| > 1e-5, or a repeated id): $mismatches."
awk -v c1="$cores_before" -v c2="$cores_after" 'BEGIN { c = (c1 < c2) ? c1 : c2;
    printf "cores: %.2f (CPU 2 busy processes got around the runs; 2.00 = two free cores)%s\n", c, (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }'
[ "$mismatches" = 0 ] || exit 2

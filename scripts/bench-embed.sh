#!/usr/bin/env bash
# xsent vs sentence-transformers on PyTorch CPU: same model, same 2,000 sentences
# (first 1,000 lines of tatoeba.deu-eng.eng and of tatoeba.deu-eng.deu), batch 64,
# 2 threads, run one after the other in this script. Prints sentences/s of each,
# the ratio, and the minimum cosine between xsent's and torch's vector for the
# same sentence.
#
# usage: scripts/bench-embed.sh [--models e5|minilm|all] [--repeat N]
#
#   --models   which models (default all): e5 = multilingual-e5-small ("query: "
#              prefix, max_seq_length 512), minilm = all-MiniLM-L6-v2 (no prefix, 256)
#   --repeat   time each measurement N times and keep the best (default 3)
#
# Before and after each model a short check runs a busy loop in 2 processes at
# once; the "cores" column is how many cores' worth of CPU they got (the lower
# of the two checks). Below ~1.8 the machine was not giving 2 cores at that
# time (shared or throttled vCPUs) and the 2-thread numbers are not reliable.
#
# Environment:
#   XSENT_BIN     xsent binary (default <repo>/target/release/xsent, built with
#                 `cargo build --release` if missing)
#   XSENT_MODELS  model dirs (default <repo>/models, made by scripts/setup.sh)
#   XSENT_DATA    data dir holding tatoeba/ (default <repo>/../shared/data)
#   XSENT_CACHE   cache dir (default ~/.cache/xsent); the torch venv lives in
#                 $XSENT_CACHE/bench-venv (shared with bench-train.sh and
#                 bench-mine.sh); it is set up, holding $XSENT_CACHE/bench-venv.lock,
#                 unless bench-venv/.bench-ready marks it ready
#   BENCH_TORCH_VERSION / BENCH_ST_VERSION  pinned versions when the venv is set up
#   BENCH_MIN_COS exit 2 if a model's min cosine is below this (default 0.999)
#
# The torch venv (scripts/lib/torch-venv.sh): PyPI's only linux x86_64 torch
# wheel is the CUDA build, which pulls several GB of nvidia-* wheels. We resolve
# torch + sentence-transformers with pip, install every resolved package except
# nvidia-*/cuda-*/triton with --no-deps, and let bench_embed_torch.py build small
# stand-ins for the CUDA libraries (functions that all answer "no device"). torch
# then runs on its normal CPU kernels (MKL/oneDNN, same code as the CPU-only
# build). An existing venv is kept and the packages are installed over it.
set -euo pipefail
export LC_ALL=C

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helper="$root/scripts/bench_embed_torch.py"

models_arg=all
repeat=3
while [ $# -gt 0 ]; do
    case "$1" in
        --models) models_arg="${2:-}"; shift 2 ;;
        --models=*) models_arg="${1#*=}"; shift ;;
        --repeat) repeat="${2:-}"; shift 2 ;;
        --repeat=*) repeat="${1#*=}"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-embed: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
case "$models_arg" in
    e5) keys=(e5) ;;
    minilm) keys=(minilm) ;;
    all) keys=(e5 minilm) ;;
    *) echo "bench-embed: --models must be e5, minilm or all (got '$models_arg')" >&2; exit 64 ;;
esac
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "bench-embed: --repeat must be a positive integer" >&2; exit 64; }

say() { printf 'bench-embed: %s\n' "$*" >&2; }
die() { printf 'bench-embed: error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/torch-venv.sh
. "$root/scripts/lib/torch-venv.sh" || die "cannot read $root/scripts/lib/torch-venv.sh"

batch=64
threads=2
per_lang=1000
data="${XSENT_DATA:-$root/../shared/data}"
models="${XSENT_MODELS:-$root/models}"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
venv="$cache/bench-venv"
torch_version="${BENCH_TORCH_VERSION:-2.15.0}"
st_version="${BENCH_ST_VERSION:-6.2.0}"
min_cos_ok="${BENCH_MIN_COS:-0.999}"

# Both engines get the same thread limits.
export RAYON_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

model_name() { case "$1" in e5) echo multilingual-e5-small ;; minilm) echo all-MiniLM-L6-v2 ;; esac; }
model_prefix() { case "$1" in e5) echo "query: " ;; minilm) echo "" ;; esac; }
model_maxlen() { case "$1" in e5) echo 512 ;; minilm) echo 256 ;; esac; }

# ---- inputs: models, data ---------------------------------------------------
for k in "${keys[@]}"; do
    d="$models/$(model_name "$k")"
    for f in config.json model.safetensors tokenizer.json modules.json; do
        [ -f "$d/$f" ] || die "model $(model_name "$k") is missing ($d/$f not found): run scripts/setup.sh first"
    done
done
eng="$data/tatoeba/tatoeba.deu-eng.eng"
deu="$data/tatoeba/tatoeba.deu-eng.deu"
[ -f "$eng" ] && [ -f "$deu" ] || die "tatoeba data not found under $data/tatoeba (set XSENT_DATA)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
input="$work/sentences.txt"
{ head -n "$per_lang" "$eng"; head -n "$per_lang" "$deu"; } > "$input"
n="$(wc -l < "$input")"
[ "$n" -eq $((2 * per_lang)) ] || die "expected $((2 * per_lang)) sentences, got $n"
head -n 1 "$input" > "$work/one.txt"

# ---- xsent --------------------------------------------------------------------
# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"
find_xsent "$root"
embed_help="$("$xsent" embed --help 2>&1)" || die "$xsent has no working 'embed' subcommand"
# Pass the same truncation as the torch side when xsent supports setting it.
maxlen_flag=""
grep -q -- '--max-length' <<<"$embed_help" && maxlen_flag="--max-length"

# ---- torch venv (scripts/lib/torch-venv.sh) ------------------------------------
py="$venv/bin/python"
ensure_torch_venv "$venv" "$torch_version" "$st_version"

# ---- run ------------------------------------------------------------------------
now() { echo "$EPOCHREALTIME"; }
# best wall time (s) of `xsent embed` over $repeat runs: model_dir prefix maxlen in out
time_xsent() {
    local dir="$1" prefix="$2" maxlen="$3" in="$4" out="$5" best="" t0 t1 dt i
    local -a args=(embed --model "$dir" --batch-size "$batch" --input "$in" --format f32 -o "$out")
    [ -n "$prefix" ] && args+=(--prefix "$prefix")
    [ -n "$maxlen_flag" ] && args+=("$maxlen_flag" "$maxlen")
    for ((i = 0; i < repeat; i++)); do
        t0="$(now)"
        "$xsent" "${args[@]}" > "$work/xsent.log" 2>&1 || { cat "$work/xsent.log" >&2; die "xsent embed failed"; }
        t1="$(now)"
        dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')"
        best="$(awk -v a="$best" -v b="$dt" 'BEGIN { if (a == "" || b < a) print b; else print a }')"
    done
    echo "$best"
}
json_field() { "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

rows=()
status=0
for k in "${keys[@]}"; do
    name="$(model_name "$k")"
    dir="$models/$name"
    prefix="$(model_prefix "$k")"
    maxlen="$(model_maxlen "$k")"
    cores_before="$("$py" "$helper" cpu-check)"
    say "$name: xsent (1 line, then $n lines)"
    t_one="$(time_xsent "$dir" "$prefix" "$maxlen" "$work/one.txt" "$work/one.f32")"
    t_all="$(time_xsent "$dir" "$prefix" "$maxlen" "$input" "$work/$k.xsent.f32")"
    say "$name: sentence-transformers"
    tj="$("$py" "$helper" bench --model "$dir" --input "$input" --max-seq-length "$maxlen" \
        --prefix "$prefix" --batch-size "$batch" --threads "$threads" --repeat "$repeat" \
        --out "$work/$k.torch.npy" | tail -n 1)" || die "torch benchmark failed for $name"
    cores_after="$("$py" "$helper" cpu-check)"
    cj="$("$py" "$helper" compare --torch "$work/$k.torch.npy" --xsent "$work/$k.xsent.f32")" \
        || die "could not compare the vectors for $name"
    torch_sps="$(json_field "$tj" sent_per_s)"
    min_cos="$(json_field "$cj" min_cos)"
    say "$name: torch $tj"
    say "$name: compare $cj"
    row="$(awk -v n="$n" -v ta="$t_all" -v t1="$t_one" -v ts="$torch_sps" -v mc="$min_cos" -v name="$name" \
        -v c1="$cores_before" -v c2="$cores_after" 'BEGIN {
        whole = n / ta; d = ta - t1; excl = (d > 0) ? (n - 1) / d : 0; c = (c1 < c2) ? c1 : c2
        printf "%-22s | %10.1f | %10.1f | %10.1f | %7.2f | %7.2f | %.7f | %5.2f%s", name, whole, excl, ts,
            whole / ts, excl / ts, mc, c, (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }')"
    if awk -v a="$min_cos" -v b="$min_cos_ok" 'BEGIN { exit !(a < b) }'; then
        row="$row  <-- below $min_cos_ok"
        status=2
    fi
    rows+=("$row")
done

torch_v="$(cut -d' ' -f1 "$venv/.bench-ready")"
echo
echo "xsent vs sentence-transformers ($torch_v, CPU): $n sentences ($per_lang eng + $per_lang deu, tatoeba.deu-eng), batch $batch, $threads threads, best of $repeat"
printf '%-22s | %10s | %10s | %10s | %7s | %7s | %-9s | %s\n' "model" "xsent" "xsent" "torch" "ratio" "ratio" "min" "cores"
printf '%-22s | %10s | %10s | %10s | %7s | %7s | %-9s | %s\n' "" "sent/s" "sent/s" "sent/s" "whole" "excl." "cosine" ""
printf '%-22s | %10s | %10s | %10s | %7s | %7s | %-9s | %s\n' "" "whole cmd" "excl. load" "encode" "cmd" "load" "" ""
printf -- '-----------------------+------------+------------+------------+---------+---------+-----------+------\n'
printf '%s\n' "${rows[@]}"
echo
echo "xsent whole cmd: $n / wall time of one 'xsent embed' process (start, model load, tokenise, embed, write)."
echo "xsent excl. load: $((n - 1)) / (wall time for $n lines - wall time for 1 line)."
echo "torch encode: $n / time of model.encode() only (model loaded, one warm-up encode done first)."
echo "ratio = xsent sent/s / torch sent/s; min cosine = lowest cosine between the two engines' vectors for one sentence."
echo "cores = CPU the machine gave 2 busy processes around this model's runs (2.00 = two free cores)."
exit "$status"

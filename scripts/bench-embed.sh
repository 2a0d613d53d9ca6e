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
# shellcheck source=lib/bench-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh"
bench_init bench-embed
helper="$root/scripts/bench_embed_torch.py"

models_arg=all
repeat=3
while [ $# -gt 0 ]; do
    case "$1" in
        --models) models_arg="${2:-}"; shift 2 ;;
        --models=*) models_arg="${1#*=}"; shift ;;
        --repeat) repeat="${2:-}"; shift 2 ;;
        --repeat=*) repeat="${1#*=}"; shift ;;
        -h|--help) bench_help; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done
bench_models "$models_arg" e5 minilm
bench_positive_int --repeat "$repeat"
# shellcheck source=lib/torch-venv.sh
. "$root/scripts/lib/torch-venv.sh" || die "cannot read $root/scripts/lib/torch-venv.sh"
# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"

batch=64
per_lang=1000
torch_version="${BENCH_TORCH_VERSION:-2.15.0}"
st_version="${BENCH_ST_VERSION:-6.2.0}"
# Both engines get the same thread limits.
bench_threads 2

bench_check_models
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench_tatoeba_input "$work" "$per_lang"

find_xsent "$root"
embed_help="$("$xsent" embed --help 2>&1)" || die "$xsent has no working 'embed' subcommand"
# Pass the same truncation as the torch side when xsent supports setting it.
maxlen_flag=""
grep -q -- '--max-length' <<<"$embed_help" && maxlen_flag="--max-length"

# ---- torch venv (scripts/lib/torch-venv.sh) ------------------------------------
py="$venv/bin/python"
ensure_torch_venv "$venv" "$torch_version" "$st_version"

# ---- run ------------------------------------------------------------------------
# best wall time (s) of `xsent embed` over $repeat runs: model_dir prefix maxlen in out
time_xsent() {
    local dir="$1" prefix="$2" maxlen="$3" in="$4" out="$5"
    local -a args=(embed --model "$dir" --batch-size "$batch" --input "$in" --format f32 -o "$out")
    [ -n "$prefix" ] && args+=(--prefix "$prefix")
    [ -n "$maxlen_flag" ] && args+=("$maxlen_flag" "$maxlen")
    bench_best_seconds "$repeat" "$xsent" "${args[@]}"
}

rows=()
status=0
for k in "${keys[@]}"; do
    name="$(model_name "$k")"
    dir="$models/$name"
    prefix="$(model_prefix "$k")"
    maxlen="$(model_maxlen "$k")"
    cores_before="$("$py" "$helper" cpu-check)"
    say "$name: xsent (1 line, then $n lines)"
    t_one="$(time_xsent "$dir" "$prefix" "$maxlen" "$one" "$work/one.f32")"
    t_all="$(time_xsent "$dir" "$prefix" "$maxlen" "$input" "$work/$k.xsent.f32")"
    say "$name: sentence-transformers"
    tj="$("$py" "$helper" bench --model "$dir" --input "$input" --max-seq-length "$maxlen" \
        --prefix "$prefix" --batch-size "$batch" --threads "$threads" --repeat "$repeat" \
        --out "$work/$k.torch.npy" | tail -n 1)" || die "torch benchmark failed for $name"
    cores_after="$("$py" "$helper" cpu-check)"
    cj="$("$py" "$helper" compare --torch "$work/$k.torch.npy" --xsent "$work/$k.xsent.f32")" \
        || die "could not compare the vectors for $name"
    torch_sps="$(bench_json_field "$tj" sent_per_s)"
    min_cos="$(bench_json_field "$cj" min_cos)"
    say "$name: torch $tj"
    say "$name: compare $cj"
    row="$(awk -v n="$n" -v ta="$t_all" -v t1="$t_one" -v ts="$torch_sps" -v mc="$min_cos" -v name="$name" \
        -v c1="$cores_before" -v c2="$cores_after" 'BEGIN {
        whole = n / ta; d = ta - t1; excl = (d > 0) ? (n - 1) / d : 0; c = (c1 < c2) ? c1 : c2
        printf "%-22s | %10.1f | %10.1f | %10.1f | %7.2f | %7.2f | %.7f | %5.2f%s", name, whole, excl, ts,
            whole / ts, excl / ts, mc, c, (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }')"
    if bench_cos_below "$min_cos"; then
        row="$row  <-- below $bench_min_cos"
        status=2
    fi
    rows+=("$row")
done

torch_v="$(cut -d' ' -f1 "$venv/.bench-ready")"
echo
echo "$(bench_machine); load average: $(bench_load)"
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

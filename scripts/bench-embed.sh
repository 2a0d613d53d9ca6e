#!/usr/bin/env bash
# xsent vs sentence-transformers on PyTorch CPU: same model, same 2,000 sentences
# (first 1,000 lines of tatoeba.deu-eng.eng and of tatoeba.deu-eng.deu), --batch-size 64,
# 2 threads, run one after the other in this script. Prints sentences/s of each,
# the ratio, and the minimum cosine between xsent's and torch's vector for the
# same sentence.
#
# Batching is not the same on both sides, and the output says so: both sort the texts by
# length, but sentence-transformers cuts fixed batches of 64, while xsent ends a batch early
# (at most 64 texts) when padding would pass 10 % of its real tokens or the batch would pass
# --max-batch-tokens (8192). xsent therefore computes fewer padded tokens; that is part of
# its rate. A control separates the two: torch also runs its forward (tokenising included) on
# xsent's batches, and the output gives both batchings' padding and xsent's rate against that
# control (kernels and threads alone).
#
# Ratio: xsent's sentences/s ÷ torch's (above 1: xsent is faster), printed in words too.
# The script stops (exit 1) when a side fails, a parsed value is not a number, or the
# "excl. load" time difference is not above 0; exit 2 when the vectors differ (below).
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
# The same truncation as the torch side: without --max-length xsent would use its own default.
grep -q -- '--max-length' <<<"$embed_help" || die "$xsent embed has no --max-length (needed to truncate as the torch side does)"

# ---- torch venv (scripts/lib/torch-venv.sh) ------------------------------------
py="$venv/bin/python"
ensure_torch_venv "$venv" "$torch_version" "$st_version"

# ---- run ------------------------------------------------------------------------
# best wall time (s) of `xsent embed` over $repeat runs: model_dir prefix maxlen in out
time_xsent() {
    local dir="$1" prefix="$2" maxlen="$3" in="$4" out="$5"
    local -a args=(embed --model "$dir" --batch-size "$batch" --input "$in" --format f32 -o "$out")
    [ -n "$prefix" ] && args+=(--prefix "$prefix")
    args+=(--max-length "$maxlen")
    bench_best_seconds "$repeat" "$xsent" "${args[@]}"
}

rows=()
lines=()
status=0
for k in "${keys[@]}"; do
    name="$(model_name "$k")"
    dir="$models/$name"
    prefix="$(model_prefix "$k")"
    maxlen="$(model_maxlen "$k")"
    cores_before="$("$py" "$helper" cpu-check)" || die "the core check failed"
    say "$name: xsent (1 line, then $n lines)"
    t_one="$(time_xsent "$dir" "$prefix" "$maxlen" "$one" "$work/one.f32")"
    t_all="$(time_xsent "$dir" "$prefix" "$maxlen" "$input" "$work/$k.xsent.f32")"
    say "$name: sentence-transformers"
    tj="$("$py" "$helper" bench --model "$dir" --input "$input" --max-seq-length "$maxlen" \
        --prefix "$prefix" --batch-size "$batch" --threads "$threads" --repeat "$repeat" \
        --out "$work/$k.torch.npy" --control | tail -n 1)" || die "torch benchmark failed for $name"
    cores_after="$("$py" "$helper" cpu-check)" || die "the core check failed"
    cj="$("$py" "$helper" compare --torch "$work/$k.torch.npy" --xsent "$work/$k.xsent.f32")" \
        || die "could not compare the vectors for $name"
    say "$name: torch $tj"
    say "$name: compare $cj"
    torch_sps="$(bench_json_field "$tj" sent_per_s)" || die "cannot read torch's sent_per_s for $name from: $tj"
    min_cos="$(bench_json_field "$cj" min_cos)" || die "cannot read the min cosine for $name from: $cj"
    bench_pos "$name: torch sent/s" "$torch_sps"
    bench_num "$name: min cosine" "$min_cos"
    bench_pos "$name: xsent wall time for $n lines" "$t_all"
    bench_pos "$name: xsent wall time for 1 line" "$t_one"
    bench_num "$name: core check" "$cores_before"
    bench_num "$name: core check" "$cores_after"
    # The "excl. load" rate needs the 2,000-line run to take longer than the 1-line run.
    awk -v a="$t_all" -v b="$t_one" 'BEGIN { exit !(a - b > 0) }' \
        || die "$name: xsent's $n-line run ($t_all s) was not slower than its 1-line run ($t_one s): no 'excl. load' rate"
    row="$(awk -v n="$n" -v ta="$t_all" -v t1="$t_one" -v ts="$torch_sps" -v mc="$min_cos" -v name="$name" \
        -v c1="$cores_before" -v c2="$cores_after" 'BEGIN {
        whole = n / ta; excl = (n - 1) / (ta - t1); c = (c1 < c2) ? c1 : c2
        printf "%-22s | %10.1f | %10.1f | %10.1f | %7.2f | %7.2f | %.7f | %5.2f%s", name, whole, excl, ts,
            whole / ts, excl / ts, mc, c, (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }')"
    excl_ratio="$(awk -v n="$n" -v ta="$t_all" -v t1="$t_one" -v ts="$torch_sps" 'BEGIN { printf "%.2f", (n - 1) / (ta - t1) / ts }')"
    whole_ratio="$(awk -v n="$n" -v ta="$t_all" -v ts="$torch_sps" 'BEGIN { printf "%.2f", n / ta / ts }')"
    line="$name: xsent ${excl_ratio}× torch's sentences/s excluding load ($(bench_rate_words "$excl_ratio")), ${whole_ratio}× with its whole command ($(bench_rate_words "$whole_ratio"))"
    awk -v a="$cores_before" -v b="$cores_after" 'BEGIN { exit !((a < b ? a : b) < 1.8) }' \
        && line="$line  <-- fewer than 2 cores free: quote separately"
    if bench_cos_below "$min_cos"; then
        row="$row  <-- below $bench_min_cos"
        line="$line  <-- not valid: min cosine $min_cos below $bench_min_cos, the engines did not embed the same thing"
        status=2
    fi
    rows+=("$row")
    lines+=("$line")
    # The control: torch's forward on xsent's batches, so that kernels and threads are compared
    # apart from the batching.
    ctl_sps="$(bench_json_field "$tj" control_sent_per_s)" || die "cannot read torch's control rate for $name from: $tj"
    ctl_cos="$(bench_json_field "$tj" control_min_cos_to_encode)" || die "no control cosine for $name in: $tj"
    pad_x="$(bench_json_field "$tj" padding_pct_xsent_batching)" || die "no padding figure for $name in: $tj"
    pad_st="$(bench_json_field "$tj" padding_pct_encode)" || die "no padding figure for $name in: $tj"
    bench_pos "$name: torch control sent/s" "$ctl_sps"
    bench_num "$name: control cosine" "$ctl_cos"
    awk -v c="$ctl_cos" 'BEGIN { exit !(c >= 0.9999) }' \
        || die "$name: torch on xsent's batching gave other vectors than encode() (min cosine $ctl_cos): no control"
    ctl_ratio="$(awk -v n="$n" -v ta="$t_all" -v t1="$t_one" -v ts="$ctl_sps" 'BEGIN { printf "%.2f", (n - 1) / (ta - t1) / ts }')"
    lines+=("$name: control: torch on xsent's batching $ctl_sps sent/s (padding $pad_x % of real tokens, encode()'s $pad_st %); xsent excl. load ${ctl_ratio}× that ($(bench_rate_words "$ctl_ratio"): kernels and threads alone)")
done

torch_v="$(cut -d' ' -f1 "$venv/.bench-ready")"
echo
bench_provenance "$xsent"
echo "load average: $(bench_load)"
echo "xsent vs sentence-transformers ($torch_v, CPU): $n sentences ($per_lang eng + $per_lang deu, tatoeba.deu-eng), $threads threads, best of $repeat"
echo "batching: torch: sorted by length, fixed batches of $batch; xsent: sorted by length, at most $batch a batch, cut early where"
echo "  padding would pass 10 % of the batch's real tokens (or 8192 tokens): xsent pads less, and that is part of its rate"
printf '%-22s | %10s | %10s | %10s | %7s | %7s | %-9s | %s\n' "model" "xsent" "xsent" "torch" "ratio" "ratio" "min" "cores"
printf '%-22s | %10s | %10s | %10s | %7s | %7s | %-9s | %s\n' "" "sent/s" "sent/s" "sent/s" "whole" "excl." "cosine" ""
printf '%-22s | %10s | %10s | %10s | %7s | %7s | %-9s | %s\n' "" "whole cmd" "excl. load" "encode" "cmd" "load" "" ""
printf -- '-----------------------+------------+------------+------------+---------+---------+-----------+------\n'
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${lines[@]}"
echo
echo "xsent whole cmd: $n / wall time of one 'xsent embed' process (start, model load, tokenise, embed, write)."
echo "xsent excl. load: $((n - 1)) / (wall time for $n lines - wall time for 1 line)."
echo "torch encode: $n / time of model.encode() only (model loaded, one warm-up encode done first)."
echo "control: torch tokenises and runs its forward on xsent's batches (same rule), best of $repeat, vectors checked against encode()'s."
echo "ratio = xsent sent/s ÷ torch sent/s (above 1.00: xsent is faster); min cosine = lowest cosine between the two engines' vectors for one sentence."
echo "cores = CPU the machine gave 2 busy processes around this model's runs (2.00 = two free cores)."
exit "$status"

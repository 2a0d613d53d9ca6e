#!/usr/bin/env bash
# xsent f32 / int8 (and bf16 when this xsent has it) vs sentence-transformers f32 and ONNX
# Runtime dynamic int8, side by side in one run: the same 2,000 sentences (first 1,000 lines
# of tatoeba.deu-eng.eng and .deu), --batch-size 64, 2 threads. Prints sentences/s of each,
# ratios against torch f32 and against ORT int8, each reduced-precision engine's cosine to its
# own f32 (min and mean per sentence), the CPU model and its relevant flags, the xsent build,
# the load average and a core check before and after each model (as bench-embed.sh).
#
# Ratios: an engine's sentences/s ÷ torch f32's ("/torch") or ÷ ORT int8's ("/ORT8"); above 1
# the engine is faster. The summary lines say each in words.
# Batching differs as in bench-embed.sh: torch and ORT cut fixed batches of 64 from the
# length-sorted texts; xsent cuts a batch early where padding would pass 10 % of its real
# tokens (or 8192 tokens), so it pads less, and that is part of its rate.
#
# Quality gates (a fast but wrong reduced-precision path must not pass): the minimum cosine per
# sentence, over the 2,000 sentences,
#   xsent f32 to torch f32   >= BENCH_MIN_COS      (default 0.999; measured 1.0000)
#   xsent int8 to xsent f32  >= BENCH_MIN_COS_INT8 (default 0.985; measured 0.9992 e5-small and
#                               0.9924 MiniLM with the shipped scheme, docs/quantization.md: the
#                               bound leaves twice MiniLM's distance from 1 as margin)
#   xsent bf16 to xsent f32  >= BENCH_MIN_COS_BF16 (default 0.999; measured 0.9999-1.0000)
#   ORT int8 to torch f32    >= BENCH_MIN_COS_ORT  (default 0.90; measured 0.9489 MiniLM and
#                               0.9839 e5-small: a looser bound, only to catch a broken export)
# A row below its bound is marked and the script exits 2. It stops (exit 1) when a side fails,
# a parsed value is not a number, or an "excl. load" time difference is not above 0.
#
# usage: scripts/bench-embed-dtype.sh [--models e5|minilm|all] [--repeat N]
#
# ORT int8: the model exported with torch.onnx, optimised by onnxruntime.transformers
# (fused attention/LayerNorm/GELU) and quantised with onnxruntime.quantization.quantize_dynamic
# (scripts/bench_embed_ort.py). xsent sent/s exclude model loading (wall time for 2,000 lines
# minus wall time for 1 line), as torch and ORT are timed after loading.
#
# Environment: as scripts/bench-embed.sh (XSENT_BIN, XSENT_MODELS, XSENT_DATA, XSENT_CACHE);
# BENCH_MIN_COS, BENCH_MIN_COS_INT8, BENCH_MIN_COS_BF16, BENCH_MIN_COS_ORT: the gates above.
set -euo pipefail
# shellcheck source=lib/bench-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh"
bench_init bench-embed-dtype
helper="$root/scripts/bench_embed_torch.py"
ort_helper="$root/scripts/bench_embed_ort.py"

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
bench_threads 2
bench_check_models
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench_tatoeba_input "$work" "$per_lang"
find_xsent "$root"
dtypes=(f32 int8)
# bf16 where this xsent runs it on the CPU.
if "$xsent" embed --model "$models/$(model_name "${keys[0]}")" --dtype bf16 --input "$one" --format f32 -o "$work/probe.f32" >/dev/null 2>&1; then
    dtypes+=(bf16)
fi
py="$venv/bin/python"
ensure_torch_venv "$venv" "${BENCH_TORCH_VERSION:-2.15.0}" "${BENCH_ST_VERSION:-6.2.0}"
"$py" -c 'import onnxruntime, onnx' 2>/dev/null || die "$venv lacks onnxruntime/onnx: $py -m pip install onnxruntime onnx"

# best wall time (s) of `xsent embed` over $repeat runs: dtype dir prefix maxlen in out
time_xsent() {
    local dtype="$1" dir="$2" prefix="$3" maxlen="$4" in="$5" out="$6"
    local -a args=(embed --model "$dir" --dtype "$dtype" --batch-size "$batch" --input "$in" --format f32 -o "$out" --max-length "$maxlen")
    [ -n "$prefix" ] && args+=(--prefix "$prefix")
    bench_best_seconds "$repeat" "$xsent" "${args[@]}"
}
min_cos_int8="${BENCH_MIN_COS_INT8:-0.985}"
min_cos_bf16="${BENCH_MIN_COS_BF16:-0.999}"
min_cos_ort="${BENCH_MIN_COS_ORT:-0.90}"
for v in "$bench_min_cos" "$min_cos_int8" "$min_cos_bf16" "$min_cos_ort"; do bench_num "a BENCH_MIN_COS* bound" "$v"; done
# "min mean" cosine per sentence between two vector files (.npy or raw little-endian f32) of
# $n rows each; fails when either does not hold $n rows of the same width.
cosines() {
    "$py" - "$1" "$2" "$n" <<'PY'
import sys, numpy as np
def load(p, n):
    x = np.load(p) if p.endswith(".npy") else np.fromfile(p, dtype="<f4")
    if x.size == 0 or x.size % n:
        sys.exit(f"cosines: {p} holds {x.size} values, not {n} rows")
    return x.reshape(n, -1).astype(np.float64)
n = int(sys.argv[3])
a, b = load(sys.argv[1], n), load(sys.argv[2], n)
if a.shape != b.shape:
    sys.exit(f"cosines: shapes {a.shape} and {b.shape} differ")
c = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
if not np.isfinite(c).all():
    sys.exit("cosines: a vector is zero or not finite")
print(f"{c.min():.4f} {c.mean():.4f}")
PY
}
# cos_row A B LABEL BOUND WHAT: sets $cos to "min mean (WHAT)", marked (and status 2) below BOUND
cos_row() {
    local c
    c="$(cosines "$1" "$2")" || die "$3: comparing the vectors failed"
    bench_num "$3: min cosine" "${c%% *}"
    cos="$c ($5)"
    if awk -v a="${c%% *}" -v b="$4" 'BEGIN { exit !(a < b) }'; then
        cos="$cos  <-- below $4: ratios not valid"
        status=2
    fi
}

status=0
rows=()
lines=()
for k in "${keys[@]}"; do
    name="$(model_name "$k")"; dir="$models/$name"; prefix="$(model_prefix "$k")"; maxlen="$(model_maxlen "$k")"
    say "$name: ONNX export and dynamic int8 quantisation"
    "$py" "$ort_helper" export --model "$dir" --out "$work/$k.onnx" --max-seq-length "$maxlen" >&2 || die "ONNX export failed for $name"
    "$py" "$ort_helper" quantize --in "$work/$k.onnx" --out "$work/$k.int8.onnx" >&2 || die "ORT quantisation failed for $name"
    cores_before="$("$py" "$helper" cpu-check)" || die "the core check failed"
    bench_num "$name: core check" "$cores_before"
    declare -A sps=()
    for dt in "${dtypes[@]}"; do
        say "$name: xsent $dt"
        t1="$(time_xsent "$dt" "$dir" "$prefix" "$maxlen" "$one" "$work/one.f32")" || die "xsent $dt failed for $name"
        ta="$(time_xsent "$dt" "$dir" "$prefix" "$maxlen" "$input" "$work/$k.xsent.$dt.f32")" || die "xsent $dt failed for $name"
        bench_pos "$name: xsent $dt wall time for 1 line" "$t1"
        bench_pos "$name: xsent $dt wall time for $n lines" "$ta"
        awk -v a="$ta" -v b="$t1" 'BEGIN { exit !(a - b > 0) }' \
            || die "$name: xsent $dt's $n-line run ($ta s) was not slower than its 1-line run ($t1 s): no rate excluding load"
        sps[$dt]="$(awk -v n="$n" -v a="$ta" -v b="$t1" 'BEGIN { printf "%.1f", (n - 1) / (a - b) }')"
    done
    say "$name: sentence-transformers f32"
    tj="$("$py" "$helper" bench --model "$dir" --input "$input" --max-seq-length "$maxlen" --prefix "$prefix" \
        --batch-size "$batch" --threads "$threads" --repeat "$repeat" --out "$work/$k.torch.npy" | tail -n 1)" || die "torch benchmark failed for $name"
    say "$name: ONNX Runtime int8"
    oj="$("$py" "$ort_helper" bench --onnx "$work/$k.int8.onnx" --model "$dir" --input "$input" --max-seq-length "$maxlen" \
        --prefix "$prefix" --batch-size "$batch" --threads "$threads" --repeat "$repeat" --out "$work/$k.ort.npy" | tail -n 1)" || die "ORT benchmark failed for $name"
    cores_after="$("$py" "$helper" cpu-check)" || die "the core check failed"
    bench_num "$name: core check" "$cores_after"
    torch="$(bench_json_field "$tj" sent_per_s)" || die "cannot read torch's sent_per_s for $name from: $tj"
    ort="$(bench_json_field "$oj" sent_per_s)" || die "cannot read ORT's sent_per_s for $name from: $oj"
    bench_pos "$name: torch f32 sent/s" "$torch"
    bench_pos "$name: ORT int8 sent/s" "$ort"
    cos_row "$work/$k.ort.npy" "$work/$k.torch.npy" "$name ORT int8" "$min_cos_ort" "vs torch f32"
    # Every /ORT8 ratio of this model compares with ORT's row: not valid when that row is not.
    ort_cos="$cos"
    rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "torch f32" "$torch" 1 "$(awk -v a="$torch" -v b="$ort" 'BEGIN { print a / b }')" "-")")
    rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "ORT int8" "$ort" "$(awk -v a="$ort" -v b="$torch" 'BEGIN { print a / b }')" 1 "$cos")")
    for dt in "${dtypes[@]}"; do
        s="${sps[$dt]}"
        case "$dt" in
            # The two f32 engines must embed the same text the same way, or the ratios compare
            # different work (as when a prompt was applied twice on the torch side).
            f32) cos_row "$work/$k.xsent.f32.f32" "$work/$k.torch.npy" "$name xsent f32" "$bench_min_cos" "vs torch f32" ;;
            int8) cos_row "$work/$k.xsent.int8.f32" "$work/$k.xsent.f32.f32" "$name xsent int8" "$min_cos_int8" "vs xsent f32" ;;
            bf16) cos_row "$work/$k.xsent.bf16.f32" "$work/$k.xsent.f32.f32" "$name xsent bf16" "$min_cos_bf16" "vs xsent f32" ;;
        esac
        rt="$(awk -v a="$s" -v b="$torch" 'BEGIN { printf "%.2f", a / b }')"
        ro="$(awk -v a="$s" -v b="$ort" 'BEGIN { printf "%.2f", a / b }')"
        rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "xsent $dt" "$s" "$rt" "$ro" "$cos")")
        line="$name: xsent $dt ${rt}× torch f32's sentences/s ($(bench_rate_words "$rt")), ${ro}× ORT int8's ($(bench_rate_words "$ro"))"
        case "$cos" in *"<--"*) line="$line  <-- not valid: below its cosine bound" ;; esac
        case "$ort_cos" in *"<--"*) line="$line  <-- the ×ORT ratio is not valid: ORT int8's vectors are below their cosine bound" ;; esac
        lines+=("$line")
    done
    lines+=("$(awk -v n="$name" -v a="$cores_before" -v b="$cores_after" 'BEGIN { c = (a < b) ? a : b;
        printf "%s: cores %.2f (the lower of the checks before and after)%s", n, c, (c < 1.8) ? "  <-- fewer than 2 cores free" : "" }')")
    unset sps
done

echo
bench_provenance "$xsent"
echo "load average: $(bench_load); $n sentences (tatoeba.deu-eng), $threads threads, best of $repeat"
echo "batching: torch and ORT: length-sorted fixed batches of $batch; xsent: at most $batch a batch, cut early where padding"
echo "  would pass 10 % of its real tokens (or 8192 tokens): xsent pads less, and that is part of its rate"
echo "/torch, /ORT8: the engine's sentences/s ÷ torch f32's, ÷ ORT int8's (above 1.00: the engine is faster)"
printf '%-22s | %-12s | %9s | %6s | %6s | %s\n' model engine sent/s "/torch" "/ORT8" "cosine min mean"
printf -- '-----------------------+--------------+-----------+--------+--------+----------------\n'
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${lines[@]}"
echo "cosine bounds: xsent f32 vs torch f32 $bench_min_cos, int8 vs xsent f32 $min_cos_int8, bf16 vs xsent f32 $min_cos_bf16, ORT int8 vs torch f32 $min_cos_ort"
exit "$status"

#!/usr/bin/env bash
# xsent f32 / int8 (and bf16 when this xsent has it) vs sentence-transformers f32 and ONNX
# Runtime dynamic int8, side by side in one run: the same 2,000 sentences (first 1,000 lines
# of tatoeba.deu-eng.eng and .deu), batch 64, 2 threads. Prints sentences/s of each, ratios
# against torch f32 and against ORT int8, each reduced-precision engine's cosine to its own
# f32 (min and mean per sentence), the CPU model and its relevant flags, and the load average.
#
# usage: scripts/bench-embed-dtype.sh [--models e5|minilm|all] [--repeat N]
#
# ORT int8: the model exported with torch.onnx, optimised by onnxruntime.transformers
# (fused attention/LayerNorm/GELU) and quantised with onnxruntime.quantization.quantize_dynamic
# (scripts/bench_embed_ort.py). xsent sent/s exclude model loading (wall time for 2,000 lines
# minus wall time for 1 line), as torch and ORT are timed after loading.
#
# Environment: as scripts/bench-embed.sh (XSENT_BIN, XSENT_MODELS, XSENT_DATA, XSENT_CACHE);
# BENCH_MIN_COS: exit 2 if xsent f32's min cosine to torch f32 is below this (default 0.999).
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
# "min mean" cosine per sentence between two vector files (.npy or raw little-endian f32)
cosines() {
    "$py" - "$1" "$2" <<'PY'
import sys, numpy as np
def load(p):
    return np.load(p) if p.endswith(".npy") else np.fromfile(p, dtype="<f4")
a, b = load(sys.argv[1]), load(sys.argv[2])
d = a.size // 2000 if a.ndim == 1 else a.shape[1]
a, b = a.reshape(-1, d).astype(np.float64), b.reshape(-1, d).astype(np.float64)
c = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
print(f"{c.min():.4f} {c.mean():.4f}")
PY
}

status=0
rows=()
for k in "${keys[@]}"; do
    name="$(model_name "$k")"; dir="$models/$name"; prefix="$(model_prefix "$k")"; maxlen="$(model_maxlen "$k")"
    say "$name: ONNX export and dynamic int8 quantisation"
    "$py" "$ort_helper" export --model "$dir" --out "$work/$k.onnx" --max-seq-length "$maxlen" >&2 || die "ONNX export failed for $name"
    "$py" "$ort_helper" quantize --in "$work/$k.onnx" --out "$work/$k.int8.onnx" >&2 || die "ORT quantisation failed for $name"
    declare -A sps=()
    for dt in "${dtypes[@]}"; do
        say "$name: xsent $dt"
        t1="$(time_xsent "$dt" "$dir" "$prefix" "$maxlen" "$one" "$work/one.f32")"
        ta="$(time_xsent "$dt" "$dir" "$prefix" "$maxlen" "$input" "$work/$k.xsent.$dt.f32")"
        sps[$dt]="$(awk -v n="$n" -v a="$ta" -v b="$t1" 'BEGIN { printf "%.1f", (n - 1) / (a - b) }')"
    done
    say "$name: sentence-transformers f32"
    tj="$("$py" "$helper" bench --model "$dir" --input "$input" --max-seq-length "$maxlen" --prefix "$prefix" \
        --batch-size "$batch" --threads "$threads" --repeat "$repeat" --out "$work/$k.torch.npy" | tail -n 1)" || die "torch benchmark failed for $name"
    say "$name: ONNX Runtime int8"
    oj="$("$py" "$ort_helper" bench --onnx "$work/$k.int8.onnx" --model "$dir" --input "$input" --max-seq-length "$maxlen" \
        --prefix "$prefix" --batch-size "$batch" --threads "$threads" --repeat "$repeat" --out "$work/$k.ort.npy" | tail -n 1)" || die "ORT benchmark failed for $name"
    torch="$(bench_json_field "$tj" sent_per_s)"; ort="$(bench_json_field "$oj" sent_per_s)"
    rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "torch f32" "$torch" 1 "$(awk -v a="$torch" -v b="$ort" 'BEGIN { print a / b }')" "-")")
    rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "ORT int8" "$ort" "$(awk -v a="$ort" -v b="$torch" 'BEGIN { print a / b }')" 1 "$(cosines "$work/$k.ort.npy" "$work/$k.torch.npy") (vs torch f32)")")
    for dt in "${dtypes[@]}"; do
        s="${sps[$dt]}"
        cos="-"
        [ "$dt" != f32 ] && cos="$(cosines "$work/$k.xsent.$dt.f32" "$work/$k.xsent.f32.f32") (vs xsent f32)"
        if [ "$dt" = f32 ]; then
            cos="$(cosines "$work/$k.xsent.f32.f32" "$work/$k.torch.npy") (vs torch f32)"
            # The two f32 engines must embed the same text the same way, or the ratios compare
            # different work (as when a prompt was applied twice on the torch side).
            if bench_cos_below "${cos%% *}"; then
                cos="$cos  <-- below $bench_min_cos: the engines did not embed the same thing"
                status=2
            fi
        fi
        rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "xsent $dt" "$s" "$(awk -v a="$s" -v b="$torch" 'BEGIN { print a / b }')" "$(awk -v a="$s" -v b="$ort" 'BEGIN { print a / b }')" "$cos")")
    done
    unset sps
done

echo
echo "$(bench_machine)"
echo "load average: $(bench_load); $n sentences (tatoeba.deu-eng), batch $batch, $threads threads, best of $repeat"
printf '%-22s | %-12s | %9s | %6s | %6s | %s\n' model engine sent/s "/torch" "/ORT8" "cosine min mean"
printf -- '-----------------------+--------------+-----------+--------+--------+----------------\n'
printf '%s\n' "${rows[@]}"
exit "$status"

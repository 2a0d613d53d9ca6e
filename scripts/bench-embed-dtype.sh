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
# Environment: as scripts/bench-embed.sh (XSENT_BIN, XSENT_MODELS, XSENT_DATA, XSENT_CACHE).
set -euo pipefail
export LC_ALL=C

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-embed-dtype: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
case "$models_arg" in
    e5) keys=(e5) ;;
    minilm) keys=(minilm) ;;
    all) keys=(e5 minilm) ;;
    *) echo "bench-embed-dtype: --models must be e5, minilm or all (got '$models_arg')" >&2; exit 64 ;;
esac
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "bench-embed-dtype: --repeat must be a positive integer" >&2; exit 64; }

say() { printf 'bench-embed-dtype: %s\n' "$*" >&2; }
die() { printf 'bench-embed-dtype: error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/torch-venv.sh
. "$root/scripts/lib/torch-venv.sh" || die "cannot read $root/scripts/lib/torch-venv.sh"

batch=64
threads=2
per_lang=1000
data="${XSENT_DATA:-$root/../shared/data}"
models="${XSENT_MODELS:-$root/models}"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
venv="$cache/bench-venv"
export RAYON_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

model_name() { case "$1" in e5) echo multilingual-e5-small ;; minilm) echo all-MiniLM-L6-v2 ;; esac; }
model_prefix() { case "$1" in e5) echo "query: " ;; minilm) echo "" ;; esac; }
model_maxlen() { case "$1" in e5) echo 512 ;; minilm) echo 256 ;; esac; }

eng="$data/tatoeba/tatoeba.deu-eng.eng"
deu="$data/tatoeba/tatoeba.deu-eng.deu"
[ -f "$eng" ] && [ -f "$deu" ] || die "tatoeba data not found under $data/tatoeba (set XSENT_DATA)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
input="$work/sentences.txt"
{ head -n "$per_lang" "$eng"; head -n "$per_lang" "$deu"; } > "$input"
n="$(wc -l < "$input")"
head -n 1 "$input" > "$work/one.txt"

# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"
find_xsent "$root"
dtypes=(f32 int8)
# bf16 where this xsent runs it on the CPU.
if "$xsent" embed --model "$models/$(model_name "${keys[0]}")" --dtype bf16 --input "$work/one.txt" --format f32 -o "$work/probe.f32" >/dev/null 2>&1; then
    dtypes+=(bf16)
fi
py="$venv/bin/python"
ensure_torch_venv "$venv" "${BENCH_TORCH_VERSION:-2.15.0}" "${BENCH_ST_VERSION:-6.2.0}"
"$py" -c 'import onnxruntime, onnx' 2>/dev/null || die "$venv lacks onnxruntime/onnx: $py -m pip install onnxruntime onnx"

now() { echo "$EPOCHREALTIME"; }
# best wall time (s) of `xsent embed` over $repeat runs: dtype dir prefix maxlen in out
time_xsent() {
    local dtype="$1" dir="$2" prefix="$3" maxlen="$4" in="$5" out="$6" best="" t0 t1 dt i
    local -a args=(embed --model "$dir" --dtype "$dtype" --batch-size "$batch" --input "$in" --format f32 -o "$out" --max-length "$maxlen")
    [ -n "$prefix" ] && args+=(--prefix "$prefix")
    for ((i = 0; i < repeat; i++)); do
        t0="$(now)"
        "$xsent" "${args[@]}" > "$work/xsent.log" 2>&1 || { cat "$work/xsent.log" >&2; die "xsent embed --dtype $dtype failed"; }
        t1="$(now)"
        dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')"
        best="$(awk -v a="$best" -v b="$dt" 'BEGIN { if (a == "" || b < a) print b; else print a }')"
    done
    echo "$best"
}
json_field() { "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
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

rows=()
for k in "${keys[@]}"; do
    name="$(model_name "$k")"; dir="$models/$name"; prefix="$(model_prefix "$k")"; maxlen="$(model_maxlen "$k")"
    say "$name: ONNX export and dynamic int8 quantisation"
    "$py" "$ort_helper" export --model "$dir" --out "$work/$k.onnx" --max-seq-length "$maxlen" >&2 || die "ONNX export failed for $name"
    "$py" "$ort_helper" quantize --in "$work/$k.onnx" --out "$work/$k.int8.onnx" >&2 || die "ORT quantisation failed for $name"
    declare -A sps=()
    for dt in "${dtypes[@]}"; do
        say "$name: xsent $dt"
        t1="$(time_xsent "$dt" "$dir" "$prefix" "$maxlen" "$work/one.txt" "$work/one.f32")"
        ta="$(time_xsent "$dt" "$dir" "$prefix" "$maxlen" "$input" "$work/$k.xsent.$dt.f32")"
        sps[$dt]="$(awk -v n="$n" -v a="$ta" -v b="$t1" 'BEGIN { printf "%.1f", (n - 1) / (a - b) }')"
    done
    say "$name: sentence-transformers f32"
    tj="$("$py" "$helper" bench --model "$dir" --input "$input" --max-seq-length "$maxlen" --prefix "$prefix" \
        --batch-size "$batch" --threads "$threads" --repeat "$repeat" --out "$work/$k.torch.npy" | tail -n 1)" || die "torch benchmark failed for $name"
    say "$name: ONNX Runtime int8"
    oj="$("$py" "$ort_helper" bench --onnx "$work/$k.int8.onnx" --model "$dir" --input "$input" --max-seq-length "$maxlen" \
        --prefix "$prefix" --batch-size "$batch" --threads "$threads" --repeat "$repeat" --out "$work/$k.ort.npy" | tail -n 1)" || die "ORT benchmark failed for $name"
    torch="$(json_field "$tj" sent_per_s)"; ort="$(json_field "$oj" sent_per_s)"
    rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "torch f32" "$torch" 1 "$(awk -v a="$torch" -v b="$ort" 'BEGIN { print a / b }')" "-")")
    rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "ORT int8" "$ort" "$(awk -v a="$ort" -v b="$torch" 'BEGIN { print a / b }')" 1 "$(cosines "$work/$k.ort.npy" "$work/$k.torch.npy") (vs torch f32)")")
    for dt in "${dtypes[@]}"; do
        s="${sps[$dt]}"
        cos="-"
        [ "$dt" != f32 ] && cos="$(cosines "$work/$k.xsent.$dt.f32" "$work/$k.xsent.f32.f32") (vs xsent f32)"
        [ "$dt" = f32 ] && cos="$(cosines "$work/$k.xsent.f32.f32" "$work/$k.torch.npy") (vs torch f32)"
        rows+=("$(printf '%-22s | %-12s | %9.1f | %6.2f | %6.2f | %s' "$name" "xsent $dt" "$s" "$(awk -v a="$s" -v b="$torch" 'BEGIN { print a / b }')" "$(awk -v a="$s" -v b="$ort" 'BEGIN { print a / b }')" "$cos")")
    done
    unset sps
done

echo
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|avx512f|avx512bw|avx512_vnni|avx_vnni|avx512_bf16|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $n sentences (tatoeba.deu-eng), batch $batch, $threads threads, best of $repeat"
printf '%-22s | %-12s | %9s | %6s | %6s | %s\n' model engine sent/s "/torch" "/ORT8" "cosine min mean"
printf -- '-----------------------+--------------+-----------+--------+--------+----------------\n'
printf '%s\n' "${rows[@]}"

#!/usr/bin/env bash
# xsent embed on a GPU against sentence-transformers' encode on the same GPU, side by side in
# one run: the same model directory, the same sentences (Tatoeba, in turn from every language
# file, repeated up to --sentences), batch 64, sorted by length in both (encode sorts too).
#
# usage: scripts/bench-embed-gpu.sh --models DIR[,DIR...] [--data DIR] [--sentences 20000]
#                                   [--batch 64] [--dry-run]
#
# Per model and dtype it prints sentences/s of each engine and the ratio xsent/torch (the
# target is >= 1.0). torch's time is encode() alone on a loaded, warmed-up model (best of 2);
# xsent's is the embed command's wall time minus that of the same command on 64 sentences
# (loading, CUDA start and the first batch), i.e. its encoding alone; the whole command's time
# is printed too. bf16 runs for xsent once `xsent embed` has --dtype (the column says so
# otherwise). Lines starting RESULT are read by gpu-check.sh.
#
# Environment: XSENT_BIN (default target-cuda/release/xsent), XSENT_PYTHON (default python3,
# with torch, sentence-transformers, numpy), XSENT_DATA (default ../shared/data), CUDA libraries
# on LD_LIBRARY_PATH (gpu-check.sh sets it from torch's install).
set -uo pipefail
# shellcheck source=lib/bench-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh"
bench_init bench-embed-gpu
export LC_ALL=C.UTF-8
py="${XSENT_PYTHON:-python3}"
xsent="${XSENT_BIN:-$root/target-cuda/release/xsent}"
helper="$root/scripts/gpu_check.py"
models="" n=20000 batch=64 dry=0
while [ $# -gt 0 ]; do
    case "$1" in
        --models) models="${2:-}"; shift 2 ;;
        --data) data="${2:-}"; shift 2 ;;
        --sentences) n="${2:-}"; shift 2 ;;
        --batch) batch="${2:-}"; shift 2 ;;
        --dry-run) dry=1; shift ;;
        -h|--help) bench_help; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done
[ -n "$models" ] || die "--models DIR[,DIR...] is required (sentence-transformers directories xsent loads too)"
[ -x "$xsent" ] || die "no xsent binary at $xsent (scripts/build-cuda.sh builds one; set XSENT_BIN)"
[ -d "$data/tatoeba" ] || die "no $data/tatoeba (set XSENT_DATA or --data)"
IFS=, read -r -a dirs <<<"$models"
for m in "${dirs[@]}"; do [ -f "$m/config.json" ] && [ -f "$m/modules.json" ] || die "$m is not a sentence-transformers model directory"; done
"$py" -c 'import torch, sentence_transformers, numpy' 2>/dev/null || die "$py lacks torch, sentence-transformers or numpy"
dtypes=(f32 bf16)
xsent_has_dtype=0
"$xsent" embed --help 2>/dev/null | grep -q -- '--dtype' && xsent_has_dtype=1
if [ "$dry" = 1 ]; then
    echo "bench-embed-gpu: would embed $n sentences with ${dirs[*]} in ${dtypes[*]} (xsent --dtype: $([ $xsent_has_dtype = 1 ] && echo yes || echo 'not yet: f32 only'))"
    exit 0
fi
# XSENT_BENCH_DEVICE=cpu: gpu-check.sh's rehearsal without a GPU (the numbers mean nothing).
bdev="${XSENT_BENCH_DEVICE:-cuda}"
if [ "$bdev" = cuda ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || die "no NVIDIA GPU here (nvidia-smi finds none)"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" "$helper" sentences --data "$data" --n "$n" --out "$tmp/s.txt" >/dev/null || die "cannot collect sentences"
head -n "$batch" "$tmp/s.txt" >"$tmp/small.txt"
# Wall seconds of a command (its stderr shown if it fails); arithmetic in python (no bc there).
secs() { "$py" -c 'import subprocess,sys,time; t=time.perf_counter(); r=subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); sys.stderr.write(r.stderr.decode(errors="replace") if r.returncode else ""); print(time.perf_counter()-t) if r.returncode == 0 else sys.exit(1)' "$@"; }
calc() { "$py" -c "print($1)"; }
echo "GPU: $([ "$bdev" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1 || echo "none: a rehearsal on the CPU"); $n sentences, batch $batch"
printf '%-12s | %-5s | %14s | %14s | %14s | %7s\n' model dtype "xsent sent/s" "xsent cmd s" "torch sent/s" ratio
for m in "${dirs[@]}"; do
    name="$(basename "$m")"
    for dt in "${dtypes[@]}"; do
        flag=()
        if [ "$dt" = bf16 ]; then
            [ $xsent_has_dtype = 1 ] && flag=(--dtype bf16)
        fi
        tj=$("$py" "$helper" torch-embed --model "$m" --input "$tmp/s.txt" --dtype "$dt" --batch "$batch" --repeat 2) || die "torch failed on $name $dt"
        tsps=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["sentences_per_s"])' "$tj")
        if [ "$dt" = bf16 ] && [ $xsent_has_dtype = 0 ]; then
            printf '%-12s | %-5s | %14s | %14s | %14.0f | %7s\n' "$name" "$dt" "no --dtype yet" "-" "$tsps" "-"
            echo "RESULT embed $name $dt | torch $(printf %.0f "$tsps") sent/s; xsent has no --dtype yet | null"
            continue
        fi
        best="" small="" failed=0
        for _ in 1 2; do
            s=$(secs "$xsent" embed -m "$m" --device "$bdev" "${flag[@]}" -i "$tmp/s.txt" --format npy -o "$tmp/x.npy" --batch-size "$batch" 2>"$tmp/err") \
                && t=$(secs "$xsent" embed -m "$m" --device "$bdev" "${flag[@]}" -i "$tmp/small.txt" --format npy -o "$tmp/y.npy" --batch-size "$batch" 2>"$tmp/err") \
                || { failed=1; break; }
            best=$(calc "min($s, ${best:-$s})")
            small=$(calc "min($t, ${small:-$t})")
        done
        if [ $failed = 1 ]; then
            # One failed engine/dtype is a row; the other rows still run.
            printf '%-12s | %-5s | %14s | %14s | %14.0f | %7s\n' "$name" "$dt" "failed" "-" "$tsps" "-"
            echo "RESULT embed $name $dt | xsent failed: $(tail -n1 "$tmp/err" | cut -c1-160) | false"
            continue
        fi
        xsps=$(calc "($n - $batch) / max($best - $small, 1e-9)")
        ratio=$(calc "$xsps / $tsps")
        ok=$(calc "'true' if $ratio >= 1.0 else 'false'")
        printf '%-12s | %-5s | %14.0f | %14.2f | %14.0f | %6.2fx\n' "$name" "$dt" "$xsps" "$best" "$tsps" "$ratio"
        echo "RESULT embed $name $dt | xsent $(printf %.0f "$xsps") sent/s (command $(printf %.2f "$best") s), torch $(printf %.0f "$tsps") sent/s: $(printf %.2f "$ratio")x | $ok"
    done
done

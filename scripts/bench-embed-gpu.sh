#!/usr/bin/env bash
# xsent embed on a GPU against sentence-transformers' encode on the same GPU, side by side in
# one run: the same model directory, the same sentences (Tatoeba, in turn from every language
# file, repeated up to --sentences), --batch-size 64, sorted by length in both (encode sorts
# too). Batching still differs: sentence-transformers cuts fixed batches of 64; xsent ends a
# batch early (at most 64 texts) where padding would pass 10 % of its real tokens or the batch
# 8192 tokens, so it pads less, and that is part of its rate. CPU threads are not pinned on
# either side (torch's tokenizer may use several; xsent tokenises on one), which if anything
# favours torch.
#
# usage: scripts/bench-embed-gpu.sh --models DIR[,DIR...] [--data DIR] [--sentences 20000]
#                                   [--batch 64] [--dry-run]
#
# Per model and dtype it prints sentences/s of each engine and the ratio xsent sent/s ÷ torch
# sent/s (above 1: xsent is faster; the target is >= 1.0), and checks that the two engines
# embedded the same: the minimum cosine per sentence between xsent's and torch's vectors must
# be >= 0.99999 in f32 (gpu-check.sh part 1's bound for the same models, measured 1.0000000)
# and >= 0.99 in bf16 (xsent bf16 against torch bf16; gpu-check.sh's bound for bf16 against
# f32, measured 0.99995). A row that fails (an engine fails, a parsed value is not a number,
# the time difference below is not above 0, or the cosine is below its bound) prints no ratio,
# its RESULT line ends in "false", the other rows still run, and the script exits 1.
# torch's time is encode() alone on a loaded, warmed-up model (best of 2);
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
isnum() { [[ "$1" =~ ^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$ ]]; }
ispos() { isnum "$1" && awk -v v="$1" 'BEGIN { exit !(v > 0) }'; }
declare -A min_cos=([f32]=0.99999 [bf16]=0.99)
status=0
# fail_row NAME DTYPE WHY: a row without a ratio, its RESULT false, the script's status 1
fail_row() {
    local why="${3//|//}"
    # gpu-check.sh reads RESULT lines with xargs, which quotes cannot pass.
    why="${why//\'/}"; why="${why//\"/}"
    printf '%-12s | %-5s | %s\n' "$1" "$2" "FAILED: $why" | cut -c1-200
    echo "RESULT embed $1 $2 | failed: $(cut -c1-160 <<<"$why") | false"
    say "$1 $2: $3"
    status=1
}
echo "GPU: $([ "$bdev" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1 || echo "none: a rehearsal on the CPU"); $n sentences, --batch-size $batch"
bench_provenance "$xsent"
echo "batching: torch: length-sorted fixed batches of $batch; xsent: at most $batch a batch, cut early where padding would pass"
echo "  10 % of its real tokens (or 8192 tokens), so xsent pads less. CPU threads: not pinned on either side."
echo "ratio = xsent sent/s ÷ torch sent/s (above 1.00x: xsent is faster); min cos = lowest cosine per sentence between"
echo "  the engines' vectors (bounds: f32 ${min_cos[f32]}, bf16 ${min_cos[bf16]} xsent bf16 against torch bf16)"
printf '%-12s | %-5s | %14s | %14s | %14s | %7s | %s\n' model dtype "xsent sent/s" "xsent cmd s" "torch sent/s" ratio "min cos"
for m in "${dirs[@]}"; do
    name="$(basename "$m")"
    for dt in "${dtypes[@]}"; do
        flag=()
        if [ "$dt" = bf16 ]; then
            [ $xsent_has_dtype = 1 ] && flag=(--dtype bf16)
        fi
        rm -f "$tmp/t.npy" "$tmp/x.npy"
        if ! tj=$("$py" "$helper" torch-embed --model "$m" --input "$tmp/s.txt" --dtype "$dt" --batch "$batch" --repeat 2 --out "$tmp/t.npy" 2>"$tmp/err" | tail -n 1); then
            fail_row "$name" "$dt" "torch failed: $(tail -n1 "$tmp/err")"
            continue
        fi
        tsps=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["sentences_per_s"])' "$tj" 2>/dev/null)
        if ! ispos "$tsps"; then
            fail_row "$name" "$dt" "no sentences/s in torch's output: $(cut -c1-100 <<<"$tj")"
            continue
        fi
        if [ "$dt" = bf16 ] && [ $xsent_has_dtype = 0 ]; then
            printf '%-12s | %-5s | %14s | %14s | %14.0f | %7s | %s\n' "$name" "$dt" "no --dtype yet" "-" "$tsps" "-" "-"
            echo "RESULT embed $name $dt | torch $(printf %.0f "$tsps") sent/s; xsent has no --dtype yet | null"
            continue
        fi
        best="" small="" failed=0
        for _ in 1 2; do
            s=$(secs "$xsent" embed -m "$m" --device "$bdev" "${flag[@]}" -i "$tmp/s.txt" --format npy -o "$tmp/x.npy" --batch-size "$batch" 2>"$tmp/err") \
                && t=$(secs "$xsent" embed -m "$m" --device "$bdev" "${flag[@]}" -i "$tmp/small.txt" --format npy -o "$tmp/y.npy" --batch-size "$batch" 2>"$tmp/err") \
                && ispos "$s" && ispos "$t" \
                || { failed=1; break; }
            best=$(calc "min($s, ${best:-$s})")
            small=$(calc "min($t, ${small:-$t})")
        done
        if [ $failed = 1 ]; then
            fail_row "$name" "$dt" "xsent failed: $(tail -n1 "$tmp/err")"
            continue
        fi
        # Encoding alone: the whole command's time less that of the 64-sentence command.
        if ! awk -v a="$best" -v b="$small" 'BEGIN { exit !(a - b > 0) }'; then
            fail_row "$name" "$dt" "xsent's $n-sentence command ($(printf %.3f "$best") s) was not slower than its $batch-sentence one ($(printf %.3f "$small") s): no rate"
            continue
        fi
        cj=$("$py" "$helper" cosines --a "$tmp/x.npy" --b "$tmp/t.npy" 2>"$tmp/err") || { fail_row "$name" "$dt" "comparing the vectors failed: $(tail -n1 "$tmp/err")"; continue; }
        mc=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["min_cosine"])' "$cj" 2>/dev/null)
        if ! isnum "$mc"; then
            fail_row "$name" "$dt" "no min cosine in: $cj"
            continue
        fi
        if ! awk -v a="$mc" -v b="${min_cos[$dt]}" 'BEGIN { exit !(a >= b) }'; then
            fail_row "$name" "$dt" "the engines' vectors differ: min cosine $(printf %.6f "$mc") below ${min_cos[$dt]} (xsent $(calc "round(($n - $batch) / ($best - $small))") sent/s, torch $(printf %.0f "$tsps"); no ratio)"
            continue
        fi
        xsps=$(calc "($n - $batch) / ($best - $small)")
        ratio=$(calc "$xsps / $tsps")
        ok=$(calc "'true' if $ratio >= 1.0 else 'false'")
        words=$(bench_rate_words "$ratio")
        printf '%-12s | %-5s | %14.0f | %14.2f | %14.0f | %6.2fx | %.6f\n' "$name" "$dt" "$xsps" "$best" "$tsps" "$ratio" "$mc"
        # The ratio first: gpu-check.sh's table shows a result's first 58 characters.
        echo "RESULT embed $name $dt | xsent $(printf %.2f "$ratio")x torch sent/s ($words): $(printf %.0f "$xsps") vs $(printf %.0f "$tsps") sent/s (xsent command $(printf %.2f "$best") s), min cos $(printf %.6f "$mc") | $ok"
    done
done
exit "$status"

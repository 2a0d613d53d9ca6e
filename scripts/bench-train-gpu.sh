#!/usr/bin/env bash
# A distill and a DuEAM training step on a GPU, xsent against PyTorch on the same card, side by
# side in one run: distill and DuEAM in f32, and distill in bf16 (xsent's train.precision = "bf16"
# against torch.autocast(bfloat16): bf16 matrix products, f32 weights and optimizer state).
#
# usage: scripts/bench-train-gpu.sh --student DIR --teacher DIR [--data DIR] [--steps 14]
#                                   [--batch 32] [--dry-run]
#
# Both engines train the same model directory (a sentence-transformers directory: Transformer,
# mean Pooling, Normalize) on batches of --batch XNLI dev pairs (premise in English and German),
# max length 128, AdamW (weight decay 0.01, none on biases and LayerNorm), global-norm clipping
# at 1.0, train mode (dropout as the model's config says):
#   distill: loss MSE(student(en), T) + MSE(student(de), T), T the teacher's vectors of the
#            English side, computed before the steps (xsent: distill.projection = "none").
#   dueam:   L_A − 0.003·L_B on the learner's mean-pooled vectors (no Normalize); torch gets
#            fixed WMDs, xsent computes its anchor's WMDs in the step on a first epoch, so its
#            step is reported twice: whole, and without the anchor's time (the part torch does).
# sentences/s = 2 × batch / median step time of the steps after the first 4 (warm-up); the
# ratio xsent/torch has the target >= 0.8. Lines starting RESULT are read by gpu-check.sh.
#
# --ncu: instead, where each step's time goes. Both engines run the distill step twice under
# Nsight Compute (`ncu`, kernel durations only), for --ncu-steps and twice that many steps; the
# difference divided by --ncu-steps is one step's kernels and GPU time, without loading. Beside
# the unprofiled step time, it says whether a step waits for the GPU or for the host issuing work
# ((step − GPU time) / kernels is the host's time per kernel). Lines starting PROFILE.
#
# Environment: XSENT_BIN (default target-cuda/release/xsent), XSENT_PYTHON (default python3),
# XSENT_DATA (default ../shared/data, for xnli/), CUDA libraries on LD_LIBRARY_PATH.
set -uo pipefail
# shellcheck source=lib/bench-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh"
bench_init bench-train-gpu
export LC_ALL=C.UTF-8
py="${XSENT_PYTHON:-python3}"
xsent="${XSENT_BIN:-$root/target-cuda/release/xsent}"
helper="$root/scripts/gpu_check.py"
student="" teacher="" steps=14 batch=32 dry=0 ncu=0 ncu_steps=2
while [ $# -gt 0 ]; do
    case "$1" in
        --student) student="${2:-}"; shift 2 ;;
        --teacher) teacher="${2:-}"; shift 2 ;;
        --data) data="${2:-}"; shift 2 ;;
        --steps) steps="${2:-}"; shift 2 ;;
        --batch) batch="${2:-}"; shift 2 ;;
        --dry-run) dry=1; shift ;;
        --ncu) ncu=1; shift ;;
        --ncu-steps) ncu_steps="${2:-}"; shift 2 ;;
        -h|--help) bench_help; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done
for d in "$student" "$teacher"; do [ -n "$d" ] && [ -f "$d/modules.json" ] || die "--student and --teacher must be sentence-transformers model directories"; done
[ -x "$xsent" ] || die "no xsent binary at $xsent (scripts/build-cuda.sh builds one; set XSENT_BIN)"
[ -f "$data/xnli/dev-en.tsv" ] && [ -f "$data/xnli/dev-de.tsv" ] || die "no $data/xnli/dev-{en,de}.tsv (set XSENT_DATA or --data)"
"$py" -c 'import torch, sentence_transformers' 2>/dev/null || die "$py lacks torch or sentence-transformers"
bench_positive_int --steps "$steps"
bench_positive_int --batch "$batch"
bench_positive_int --ncu-steps "$ncu_steps"
if [ "$ncu" = 1 ]; then
    command -v ncu >/dev/null || die "--ncu needs Nsight Compute's ncu on PATH"
    # Both profiled runs read 2 × --ncu-steps batches; the timed runs --steps.
    [ "$steps" -ge $((2 * ncu_steps)) ] || steps=$((2 * ncu_steps))
fi
if [ "$dry" = 1 ]; then
    echo "bench-train-gpu: would train distill (f32, bf16) and dueam (f32) for $steps steps of $batch pairs on each engine"
    exit 0
fi
# XSENT_BENCH_DEVICE=cpu: gpu-check.sh's rehearsal without a GPU (the numbers mean nothing).
bdev="${XSENT_BENCH_DEVICE:-cuda}"
if [ "$bdev" = cuda ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || die "no NVIDIA GPU here (nvidia-smi finds none)"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
n=$((steps * batch))
paste <(cut -f1 "$data/xnli/dev-en.tsv") <(cut -f1 "$data/xnli/dev-de.tsv") | awk -F'\t' 'length($1) > 0 && length($2) > 0 && !seen[$1]++' | head -n "$n" >"$tmp/pairs.tsv"
[ "$(wc -l <"$tmp/pairs.tsv")" -eq "$n" ] || die "fewer than $n distinct XNLI dev premises"
common="[train]
device = \"$bdev\"
max_steps = $steps
batch_size = $batch
log_every = 1
eval_every = 0
checkpoint_every = 0
[optim]
lr = 2e-5
schedule = \"constant\"
warmup_steps = 0
weight_decay = 0.01
max_grad_norm = 1.0"
cat >"$tmp/distill.toml" <<EOF
recipe = "distill"
seed = 1
[distill]
teacher = "$teacher"
student = "$student"
max_length = 128
projection = "none"
$common
[data]
val_size = 8
[[data.sources]]
kind = "tsv"
path = "$tmp/pairs.tsv"
src_lang = "en"
tgt_lang = "de"
EOF
cat >"$tmp/dueam.toml" <<EOF
recipe = "dueam"
seed = 1
[dueam]
anchor = "$student"
learner = "$student"
max_length = 128
pairs = "weak"
xnli_dir = "$data/xnli"
splits = ["dev"]
langs = ["en", "de"]
[[dueam.val_sources]]
kind = "aligned"
src = "$data/parallel/multi30k/val.en.gz"
tgt = "$data/parallel/multi30k/val.de.gz"
src_lang = "en"
tgt_lang = "de"
$common
EOF
echo "GPU: $([ "$bdev" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1 || echo "none: a rehearsal on the CPU"); batch $batch pairs, $steps steps, median of steps 5..$steps"
printf '%-14s | %-30s | %12s | %12s | %7s\n' recipe "xsent" "xsent sent/s" "torch sent/s" ratio
rows="distill:f32 dueam:f32 distill:bf16"
# --ncu reads only the f32 distill run's step time: the other rows would spend its time limit.
[ "$ncu" = 1 ] && rows="distill:f32"
for row in $rows; do
    r=${row%:*} prec=${row#*:}
    # The f32 rows keep their names (train distill step) so that results compare across runs.
    name=$r tag=$r
    [ "$prec" = f32 ] || { name="$r $prec" tag="$r-$prec"; }
    "$xsent" train --config "$tmp/$r.toml" --out "$tmp/run-$tag" --set "train.precision=\"$prec\"" >"$tmp/$tag.log" 2>&1 \
        || { tail -n 5 "$tmp/$tag.log" >&2; die "xsent train $tag failed"; }
    xj=$("$py" "$helper" xsent-sps --metrics "$tmp/run-$tag/metrics.jsonl" --skip 4) || die "no step times in xsent's metrics"
    # XSENT_BENCH_KEEP=DIR keeps xsent's per-step times (forward_s, backward_s, optimizer_s).
    [ -n "${XSENT_BENCH_KEEP:-}" ] && cp "$tmp/run-$tag/metrics.jsonl" "$XSENT_BENCH_KEEP/bench-train-$tag-metrics.jsonl"
    args=(--student "$student" --pairs "$tmp/pairs.tsv" --batch "$batch" --steps "$steps" --precision "$prec")
    [ "$r" = distill ] && args+=(--teacher "$teacher")
    tj=$("$py" "$helper" torch-train "$r" "${args[@]}") || die "torch $tag failed"
    read -r xsps xstep tsps <<<"$("$py" -c 'import json,sys; x,t=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(x["sentences_per_s"], x["step_s"], t["sentences_per_s"])' "$xj" "$tj")"
    what="whole step"
    if [ "$r" = dueam ]; then
        # The anchor's share (its forward and the WMDs): in the step (anchor_ms_per_pair), and
        # ahead of it (ahead_s: the next step's anchor forward and the wait for the solver).
        anchor=$("$py" -c 'import json,statistics,sys; rows=[json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l][4:]; print(statistics.median(r.get("anchor_ms_per_pair", 0.0) * int(sys.argv[2]) / 1e3 + r.get("ahead_s", 0.0) for r in rows))' "$tmp/run-$tag/metrics.jsonl" "$batch")
        whole=$(printf %.0f "$xsps")
        xsps=$("$py" -c "print(2 * $batch / max($xstep - $anchor, 1e-9))")
        what="without the anchor ($whole whole)"
    fi
    ratio=$("$py" -c "print($xsps / $tsps)")
    ok=$("$py" -c "print('true' if $ratio >= 0.8 else 'false')")
    printf '%-14s | %-30s | %12.0f | %12.0f | %6.2fx\n' "$name" "$what" "$xsps" "$tsps" "$ratio"
    echo "RESULT train $name step | xsent $(printf %.0f "$xsps") sent/s ($what), torch $(printf %.0f "$tsps"): $(printf %.2f "$ratio")x | $ok"
done

if [ "$ncu" = 1 ]; then
    # Kernels and GPU time of one distill step, each engine (its unprofiled step time above).
    xstep=$("$py" "$helper" xsent-sps --metrics "$tmp/run-distill/metrics.jsonl" --skip 4 | "$py" -c 'import json,sys; print(json.load(sys.stdin)["step_s"])')
    targs=(--student "$student" --teacher "$teacher" --pairs "$tmp/pairs.tsv" --batch "$batch")
    tstep=$("$py" "$helper" torch-train distill "${targs[@]}" --steps "$steps" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["step_s"])') || die "torch distill failed"
    for engine in xsent torch; do
        for k in "$ncu_steps" $((2 * ncu_steps)); do
            log="$tmp/ncu-$engine-$k.csv"
            if [ "$engine" = xsent ]; then
                cmd=("$xsent" train --config "$tmp/distill.toml" --out "$tmp/ncu-run-$k" --set "train.max_steps=$k")
            else
                cmd=("$py" "$helper" torch-train distill "${targs[@]}" --steps "$k")
            fi
            timeout 300 ncu --csv --metrics gpu__time_duration.sum --print-units base --log-file "$log" "${cmd[@]}" >"$tmp/ncu-$engine-$k.out" 2>&1 \
                || { tail -n 3 "$tmp/ncu-$engine-$k.out" >&2; die "ncu $engine ($k steps) failed or ran past 300 s"; }
        done
        step=$([ "$engine" = xsent ] && echo "$xstep" || echo "$tstep")
        line=$("$py" "$helper" ncu-summary --a "$tmp/ncu-$engine-$ncu_steps.csv" --b "$tmp/ncu-$engine-$((2 * ncu_steps)).csv" --steps "$ncu_steps" --step-s "$step")
        [ -n "${XSENT_BENCH_KEEP:-}" ] && cp "$tmp/ncu-$engine-$((2 * ncu_steps)).csv" "$XSENT_BENCH_KEEP/ncu-$engine-distill.csv"
        echo "PROFILE distill $engine | $line"
    done
fi

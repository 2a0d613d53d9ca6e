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
#            fixed random WMDs, xsent computes its anchor's WMDs in the step (a first epoch). The
#            ratio is of the whole step (measured; torch does less work there). A rate without
#            the anchor's share (the step's median less the median anchor time) is printed
#            beside it, marked "derived, not measured": no step was timed without the anchor.
# Both engines tokenise inside the timed step: xsent runs with train.ahead = false (otherwise
# it tokenises the next step on a background thread, outside its step time), torch tokenises
# in its step.
# sentences/s = 2 × batch / median step time of steps 5..--steps (the first 4 warm up), the
# same window on both sides. Ratio = xsent sent/s ÷ torch sent/s (above 1: xsent is faster; the
# target is >= 0.8). Lines starting RESULT are read by gpu-check.sh.
#
# Not the same batches: xsent holds 8 pairs back for validation and draws shuffled batches of
# the rest (each padded to its longest text); torch takes consecutive slices of --batch pairs
# (each side padded to its longest). Which pairs share a batch, and so the padding, differs;
# the printed header says so. CPU threads are not pinned on either side.
#
# Check (distill, f32 and bf16): both engines' step-1 loss on the same --batch pairs (the first
# of the file) with dropout off, before any update, must agree within 1e-4 relative in f32 and
# 2e-2 in bf16 (bf16's bound: gpu-check.sh allows 1e-2 between one engine's bf16 and f32, so
# two engines may be 2e-2 apart). xsent: one more run with distill.dropout = 0 on a file of just
# those pairs; torch: the same loss in eval mode before its timed steps. DuEAM has no loss check
# (torch's WMDs are random). A row whose check or run fails prints no ratio, its RESULT line
# ends in "false", the other rows still run, and the script exits 1.
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
# Steps 1-4 warm up on both sides; the median needs at least one more.
[ "$steps" -gt 4 ] || usage_error "--steps must be above 4 (the first 4 are warm-up; got $steps)"
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
skip=4
isnum() { [[ "$1" =~ ^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$ ]]; }
ispos() { isnum "$1" && awk -v v="$1" 'BEGIN { exit !(v > 0) }'; }
status=0
# fail_row NAME WHY: a row without a ratio, its RESULT false, the script's status 1
fail_row() {
    local why="${2//|//}"
    # gpu-check.sh reads RESULT lines with xargs, which quotes cannot pass.
    why="${why//\'/}"; why="${why//\"/}"
    printf '%-14s | %s\n' "$1" "FAILED: $why" | cut -c1-200
    echo "RESULT train $1 step | failed: $(cut -c1-160 <<<"$why") | false"
    say "$1: $2"
    status=1
}
# The loss check's data: the first --batch pairs (torch's first batch), and one other pair
# that only fills xsent's validation set (never scored: the run stops after step 1).
head -n "$batch" "$tmp/pairs.tsv" >"$tmp/check.tsv"
printf 'This sentence only fills the validation set.\tDieser Satz füllt nur die Validierungsmenge.\n' >"$tmp/check-val.tsv"
# xsent_check_loss PREC TAG: xsent's step-1 loss on check.tsv with dropout off
xsent_check_loss() {
    local out="$tmp/check-$2"
    # One step, then the final model only (no checkpoint with optimiser state: a third of the
    # bytes to write inside gpu-check's time limit); removed once its loss is read.
    "$xsent" train --config "$tmp/distill.toml" --out "$out" --set train.max_steps=1 --set train.checkpoint_every=0 \
        --set "data.sources=[{kind=\"tsv\", path=\"$tmp/check.tsv\", src_lang=\"en\", tgt_lang=\"de\"}]" \
        --set "data.val_sources=[{kind=\"tsv\", path=\"$tmp/check-val.tsv\", src_lang=\"en\", tgt_lang=\"de\"}]" \
        --set distill.dropout=0.0 --set train.ahead=false --set train.eval_at_start=false \
        --set "train.precision=\"$1\"" >"$tmp/check-$2.log" 2>&1 || { tail -n 3 "$tmp/check-$2.log" >&2; return 1; }
    "$py" -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]; assert r and r[0]["step"] == 1; print(r[0]["loss"])' "$out/metrics.jsonl"
    local rc=$?
    rm -rf "$out"
    return $rc
}
echo "GPU: $([ "$bdev" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1 || echo "none: a rehearsal on the CPU")"
bench_provenance "$xsent"
echo "batch $batch pairs, $steps steps; both engines: median of steps $((skip + 1))..$steps, tokenising inside the step (xsent: train.ahead = false)"
echo "not the same batches: xsent draws shuffled batches (8 pairs held out), torch takes consecutive slices; the padding differs"
echo "ratio = xsent sent/s ÷ torch sent/s (above 1.00x: xsent is faster); CPU threads not pinned on either side"
echo "loss check: distill rows, both engines' step-1 loss on the first $batch pairs with dropout off; DuEAM: none (torch's WMDs are random)"
printf '%-14s | %-42s | %12s | %12s | %7s\n' recipe "xsent" "xsent sent/s" "torch sent/s" ratio
rows="distill:f32 dueam:f32 distill:bf16"
# --ncu reads only the f32 distill run's step time: the other rows would spend its time limit.
[ "$ncu" = 1 ] && rows="distill:f32"
for row in $rows; do
    r=${row%:*} prec=${row#*:}
    # The f32 rows keep their names (train distill step) so that results compare across runs.
    name=$r tag=$r
    [ "$prec" = f32 ] || { name="$r $prec" tag="$r-$prec"; }
    if ! "$xsent" train --config "$tmp/$r.toml" --out "$tmp/run-$tag" --set "train.precision=\"$prec\"" --set train.ahead=false >"$tmp/$tag.log" 2>&1; then
        tail -n 5 "$tmp/$tag.log" >&2
        fail_row "$name" "xsent train $tag failed: $(tail -n1 "$tmp/$tag.log")"
        continue
    fi
    xj=$("$py" "$helper" xsent-sps --metrics "$tmp/run-$tag/metrics.jsonl" --skip "$skip") || { fail_row "$name" "no step times in xsent's metrics"; continue; }
    # XSENT_BENCH_KEEP=DIR keeps xsent's per-step times (forward_s, backward_s, optimizer_s).
    [ -n "${XSENT_BENCH_KEEP:-}" ] && cp "$tmp/run-$tag/metrics.jsonl" "$XSENT_BENCH_KEEP/bench-train-$tag-metrics.jsonl"
    args=(--student "$student" --pairs "$tmp/pairs.tsv" --batch "$batch" --steps "$steps" --precision "$prec" --skip "$skip")
    [ "$r" = distill ] && args+=(--teacher "$teacher" --check-loss)
    tj=$("$py" "$helper" torch-train "$r" "${args[@]}" 2>"$tmp/torch-$tag.err" | tail -n 1) \
        || { tail -n 3 "$tmp/torch-$tag.err" >&2; fail_row "$name" "torch $tag failed: $(tail -n1 "$tmp/torch-$tag.err")"; continue; }
    read -r xsps xstep tsps tcheck <<<"$("$py" -c 'import json,sys; x,t=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(x["sentences_per_s"], x["step_s"], t["sentences_per_s"], t.get("check_loss"))' "$xj" "$tj" 2>/dev/null)"
    if ! ispos "$xsps" || ! ispos "$xstep" || ! ispos "$tsps"; then
        fail_row "$name" "a step time is missing or not above 0 (xsent: $xj; torch: $tj)"
        continue
    fi
    check=""
    if [ "$r" = distill ]; then
        tol=$([ "$prec" = f32 ] && echo 1e-4 || echo 2e-2)
        if ! xcheck=$(xsent_check_loss "$prec" "$tag") || ! isnum "$xcheck" || ! isnum "$tcheck"; then
            fail_row "$name" "the loss check did not run (xsent step-1 loss '${xcheck:-}', torch '$tcheck')"
            continue
        fi
        rel=$("$py" -c "print(abs($xcheck - $tcheck) / max(abs($tcheck), 1e-12))")
        if ! awk -v a="$rel" -v b="$tol" 'BEGIN { exit !(a <= b) }'; then
            fail_row "$name" "step-1 loss with dropout off differs: xsent $xcheck, torch $tcheck (relative $(printf %.2g "$rel") > $tol); no ratio"
            continue
        fi
        check=", step-1 loss within $(printf %.1g "$rel") of torch"
    fi
    what="whole step"
    derived=""
    if [ "$r" = dueam ]; then
        # The anchor's share (its forward and the WMDs), in the step (anchor_ms_per_pair; with
        # train.ahead = false nothing is prepared ahead). Derived: the step's median less the
        # anchor's median is not the median of any measured step.
        anchor=$("$py" -c 'import json,statistics,sys; rows=[json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l][int(sys.argv[3]):]; print(statistics.median(r.get("anchor_ms_per_pair", 0.0) * int(sys.argv[2]) / 1e3 + r.get("ahead_s", 0.0) for r in rows))' "$tmp/run-$tag/metrics.jsonl" "$batch" "$skip" 2>/dev/null)
        if isnum "$anchor" && awk -v a="$xstep" -v b="$anchor" 'BEGIN { exit !(a - b > 0) }'; then
            derived=$("$py" -c "print(round(2 * $batch / ($xstep - $anchor)))")
            what="whole step (incl. the anchor)"
        fi
    fi
    ratio=$("$py" -c "print($xsps / $tsps)")
    ok=$("$py" -c "print('true' if $ratio >= 0.8 else 'false')")
    words=$(bench_rate_words "$ratio")
    printf '%-14s | %-42s | %12.0f | %12.0f | %6.2fx\n' "$name" "$what" "$xsps" "$tsps" "$ratio"
    [ -z "$derived" ] || printf '%-14s | %-42s | %12s | %12s | %7s\n' "" "without the anchor: derived, not measured" "$derived" "" ""
    # The ratio first: gpu-check.sh's table shows a result's first 58 characters.
    echo "RESULT train $name step | xsent $(printf %.2f "$ratio")x torch sent/s ($words): $(printf %.0f "$xsps") vs $(printf %.0f "$tsps") sent/s, $what$check${derived:+; $derived without the anchor: derived, not measured} | $ok"
done

if [ "$ncu" = 1 ]; then
    # Kernels and GPU time of one distill step, each engine (its unprofiled step time above).
    xstep=$("$py" "$helper" xsent-sps --metrics "$tmp/run-distill/metrics.jsonl" --skip "$skip" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["step_s"])') || die "no xsent distill step time for the profile"
    targs=(--student "$student" --teacher "$teacher" --pairs "$tmp/pairs.tsv" --batch "$batch")
    tstep=$("$py" "$helper" torch-train distill "${targs[@]}" --steps "$steps" --skip "$skip" | tail -n 1 | "$py" -c 'import json,sys; print(json.load(sys.stdin)["step_s"])') || die "torch distill failed"
    ispos "$xstep" && ispos "$tstep" || die "a profile step time is not a number above 0 (xsent '$xstep', torch '$tstep')"
    for engine in xsent torch; do
        for k in "$ncu_steps" $((2 * ncu_steps)); do
            log="$tmp/ncu-$engine-$k.csv"
            if [ "$engine" = xsent ]; then
                cmd=("$xsent" train --config "$tmp/distill.toml" --out "$tmp/ncu-run-$k" --set "train.max_steps=$k" --set train.ahead=false)
            else
                # --skip 0: these runs are read by ncu, not timed (2 steps would leave no median).
                cmd=("$py" "$helper" torch-train distill "${targs[@]}" --steps "$k" --skip 0)
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
exit "$status"

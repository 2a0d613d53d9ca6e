#!/usr/bin/env bash
# One distillation step, xsent vs PyTorch (sentence-transformers), side by side.
#
# What one "step" is, in both engines: a full optimiser step of the distill recipe
# (configs/distill-direct.toml) on one batch of 32 parallel pairs (English src, German tgt):
#   student = multilingual-e5-small ("query: " prefix, max length L below): Transformer (train
#             mode, dropout 0.1 as in its config) -> mean Pooling -> Dense 384->384 (identity
#             activation, initialised by ridge least squares on the 32 English sentences, like
#             xsent's distill.projection = "lstsq") -> L2 Normalize
#   teacher = all-MiniLM-L6-v2 embeddings of the 32 English sentences, computed once before
#             any timing (xsent: its teacher cache ~/.cache/xsent/teacher; torch: in memory)
#   loss    = MSE(student(src), T) + MSE(student(tgt), T)  (torch.nn.MSELoss, mean)
#   step    = tokenise + forward of 32 src + 32 tgt sentences, backward, clip the global
#             gradient norm to 1.0, AdamW (lr 5e-5, weight decay 0.01, none on biases and
#             LayerNorm) update of every parameter (word embeddings included: ~118M),
#             gradients cleared. Torch uses sentence_transformers' MSELoss (x2: it averages
#             the two columns) and fused AdamW, as SentenceTransformerTrainer does.
# Tokenising is inside the step on both sides: xsent runs with train.ahead = false (its
# default, true, tokenises the next step's pairs on a third thread while the step runs, outside
# its step time); torch tokenises in its step.
# xsent's times come from its own metrics.jsonl (step_s, forward_s, backward_s,
# optimizer_s); torch's are taken the same way around the same phases. Each engine runs
# --steps steps (default 8); the reported time is the median of steps --skip+1..N (default
# 3..8: the first two warm up allocators and caches).
#
# Same batch in both engines: the 32 pairs are XNLI dev premises (dev-en.tsv / dev-de.tsv,
# same row = same text) of moderate length whose 64 student inputs ("query: " + sentence) are
# all L..L+s e5 tokens long (L near the median premise length, s the smallest slack that
# finds 32; XNLI dev gives L = 28, s = 3), and both engines run with max length L
# (distill.max_length; truncation keeps the final </s>). Every input is then exactly L
# tokens: there is no padding, whatever way an engine groups or pads the 64 sentences, so
# both compute on exactly 64 x L tokens. xsent gets a TSV with exactly these 32 pairs and
# batch_size 32, so each of its steps is one epoch over all 32 pairs (in a shuffled order);
# its validation set is one other pair ([[data.val_sources]], never scored: no validation
# runs before the stop), and it stops with --stop-after N of N+1 steps (a checkpoint, no
# validation). The torch side asserts the shapes itself. The lr is constant (no warm-up) in
# both.
#
# Ratio: xsent's step time ÷ torch's (below 1: xsent is faster; the target is <= 1.0), printed
# in words too ("xsent's step takes 0.69× torch's time (faster)"). The script stops (exit 1)
# when an engine fails or a step time is missing, not a number or not above 0.
# Same computation: after round 1 (torch's JSON carries its loss of the batch in eval mode
# before any update), xsent runs one step with distill.dropout = 0 and its step-1 loss is
# compared with that (the same model, teacher targets and lstsq Dense); they must agree within
# 1e-4 relative, or the script stops before any ratio: exit 2 when they differ, 1 when a loss is
# missing. The timed runs keep dropout on in both.
#
# usage: scripts/bench-train.sh [--steps N] [--skip K] [--rounds R]
#
#   --steps   optimiser steps per engine and round (default 8)
#   --skip    leading steps left out of the median (default 2)
#   --rounds  run xsent then torch R times; each engine's best round median counts (default 1)
#
# Before and after the runs a short check runs a busy loop in 2 processes at once (the
# same one as bench-embed.sh); "cores" is how many cores' worth of CPU they got (lower of
# the two). Below ~1.8 the machine was not giving 2 free cores and the timings are noisy.
#
# Environment:
#   XSENT_BIN     xsent binary (default ${CARGO_TARGET_DIR:-<repo>/target}/release/xsent,
#                 built with `cargo build --release` if missing)
#   XSENT_MODELS  model dirs (default <repo>/models, made by scripts/setup.sh)
#   XSENT_DATA    data dir holding xnli/ (default <repo>/../shared/data)
#   XSENT_CACHE   cache dir (default ~/.cache/xsent); the torch venv is
#                 $XSENT_CACHE/bench-venv, shared with bench-embed.sh and built by the
#                 same code, scripts/lib/torch-venv.sh (CPU torch from PyPI's CUDA wheel
#                 without the nvidia-* wheels, CUDA stand-in libraries from
#                 bench_embed_torch.py make-cuda-stubs; an existing venv is kept)
#   BENCH_TORCH_VERSION / BENCH_ST_VERSION  pinned versions for a new venv (as bench-embed.sh)
#   BENCH_BATCH   pairs per batch (default 32)
#   BENCH_TORCH_ADAMW  torch's AdamW implementation: fused (default: what
#                 SentenceTransformerTrainer uses, transformers' adamw_torch_fused with
#                 torch >= 2.8), for-loop (plain torch.optim.AdamW() on the CPU) or foreach
set -euo pipefail
export LC_ALL=C

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# bench_provenance (the machine and the build with the numbers); say/die are this script's, below.
# shellcheck source=lib/bench-common.sh
. "$root/scripts/lib/bench-common.sh"
embed_helper="$root/scripts/bench_embed_torch.py"
helper="$root/scripts/bench_train_torch.py"

steps=8
skip=2
rounds=1
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) steps="${2:-}"; shift 2 ;;
        --steps=*) steps="${1#*=}"; shift ;;
        --skip) skip="${2:-}"; shift 2 ;;
        --skip=*) skip="${1#*=}"; shift ;;
        --rounds) rounds="${2:-}"; shift 2 ;;
        --rounds=*) rounds="${1#*=}"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-train: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "bench-train: --steps must be a positive integer" >&2; exit 64; }
[[ "$skip" =~ ^[0-9]+$ ]] || { echo "bench-train: --skip must be a non-negative integer" >&2; exit 64; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench-train: --rounds must be a positive integer" >&2; exit 64; }
[ "$skip" -lt "$steps" ] || { echo "bench-train: --skip ($skip) must be below --steps ($steps)" >&2; exit 64; }

say() { printf 'bench-train: %s\n' "$*" >&2; }
die() { printf 'bench-train: error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/torch-venv.sh
. "$root/scripts/lib/torch-venv.sh" || die "cannot read $root/scripts/lib/torch-venv.sh"

threads=2
batch="${BENCH_BATCH:-32}"
adamw="${BENCH_TORCH_ADAMW:-fused}"
case "$adamw" in fused|foreach|for-loop) ;; *) die "BENCH_TORCH_ADAMW must be fused, foreach or for-loop (got '$adamw')" ;; esac
[[ "$batch" =~ ^[1-9][0-9]*$ ]] || die "BENCH_BATCH must be a positive integer"
max_length=128
prefix="query: "
data="${XSENT_DATA:-$root/../shared/data}"
models="${XSENT_MODELS:-$root/models}"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
venv="$cache/bench-venv"
torch_version="${BENCH_TORCH_VERSION:-2.15.0}"
st_version="${BENCH_ST_VERSION:-6.2.0}"
student="$models/multilingual-e5-small"
teacher="$models/all-MiniLM-L6-v2"
config="$root/configs/distill-direct.toml"

# Both engines get the same thread limits.
export XSENT_THREADS=$threads RAYON_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# ---- inputs: models, data, config, helpers ------------------------------------------
for d in "$student" "$teacher"; do
    for f in config.json model.safetensors tokenizer.json modules.json 1_Pooling/config.json; do
        [ -f "$d/$f" ] || die "model $(basename "$d") is missing ($d/$f not found): run scripts/setup.sh first"
    done
done
xnli="$data/xnli"
for f in dev-en.tsv dev-de.tsv; do
    [ -f "$xnli/$f" ] || die "XNLI file $xnli/$f not found (set XSENT_DATA)"
done
[ -f "$config" ] || die "$config not found (the distill recipe's config)"
[ -f "$helper" ] || die "$helper not found"
[ -f "$embed_helper" ] || die "$embed_helper not found (needed for the venv's CUDA stubs and the core check)"

# ---- xsent ----------------------------------------------------------------------------
# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"
find_xsent "$root"
train_help="$("$xsent" train --help 2>&1)" || die "$xsent has no working 'train' subcommand"
grep -q -- '--stop-after' <<<"$train_help" || die "$xsent train has no --stop-after option (needed to stop without a validation)"

# ---- torch venv (the same one as bench-embed.sh: scripts/lib/torch-venv.sh) ---------------
py="$venv/bin/python"
ensure_torch_venv "$venv" "$torch_version" "$st_version"

# ---- the batch ------------------------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pairs="$work/pairs.tsv"
pj="$("$py" "$helper" pick-pairs --xnli-dir "$xnli" --tokenizer "$student/tokenizer.json" \
    --prefix "$prefix" --max-length "$max_length" --n "$batch" --out "$pairs" | tail -n 1)" \
    || die "could not pick $batch XNLI pairs of equal token length"
json_field() { "$py" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
seq_len="$(json_field "$pj" length)" || die "no length in pick-pairs' output: $pj"
[[ "$seq_len" =~ ^[1-9][0-9]*$ ]] || die "pick-pairs gave the length '$seq_len', not a positive integer"
[ "$(wc -l < "$pairs")" -eq "$batch" ] || die "$pairs should hold $batch pairs"
# xsent's validation set: one pair that is not among them (no validation runs).
val_pairs="$work/val.tsv"
printf 'This sentence only fills the validation set.\tDieser Satz füllt nur die Validierungsmenge.\n' > "$val_pairs"
! cut -f1 "$pairs" | grep -qxF 'This sentence only fills the validation set.' || die "the validation pair is among the batch"
say "batch: $pj"

# ---- runs -----------------------------------------------------------------------------------
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
cores_before="$("$py" "$embed_helper" cpu-check)" || die "the core check failed"

run_xsent() {  # round [extra --set args] -> prints one JSON line (medians of xsent's metrics.jsonl)
    local round="$1"
    shift
    local out="$work/xsent-run-$round" log="$work/xsent-$round.log" n="$steps"
    [ "$round" = check ] && n=1
    local src="[{kind=\"tsv\", path=\"$pairs\", src_lang=\"en\", tgt_lang=\"de\"}]"
    local val="[{kind=\"tsv\", path=\"$val_pairs\", src_lang=\"en\", tgt_lang=\"de\"}]"
    local -a args=(train --config "$config" --out "$out" --stop-after "$n"
        --set "train.max_steps=$((n + 1))" --set "data.sources=$src" --set "data.val_sources=$val"
        --set "train.batch_size=$batch" --set train.grad_accum=1 --set train.ahead=false --set train.eval_at_start=false
        --set train.eval_every=0 --set train.checkpoint_every=0 --set train.log_every=1
        --set "distill.teacher=$teacher" --set "distill.student=$student"
        --set "distill.student_prefix=$prefix" --set "distill.max_length=$seq_len"
        --set distill.projection=lstsq --set distill.normalize=true
        --set "distill.projection_fit_size=$batch" --set optim.lr=5e-5
        --set optim.weight_decay=0.01 --set optim.max_grad_norm=1.0
        --set optim.warmup_steps=0 --set optim.schedule=constant "$@")
    say "xsent round $round: xsent train, $n steps"
    (cd "$root" && "$xsent" "${args[@]}") > "$log" 2>&1 || { cat "$log" >&2; die "xsent train failed (log above)"; }
    grep -q "xsent train: $batch training pairs, 1 validation pairs" "$log" \
        || { cat "$log" >&2; die "xsent did not train on exactly the $batch pairs of $pairs (log above)"; }
    [ -f "$out/metrics.jsonl" ] || die "xsent wrote no $out/metrics.jsonl"
    if [ "$round" = check ]; then
        cp "$out/metrics.jsonl" "$work/check-metrics.jsonl"
    else
        "$py" "$helper" xsent-metrics --metrics "$out/metrics.jsonl" --steps "$steps" --skip "$skip" \
            || die "could not read xsent's step times from $out/metrics.jsonl"
    fi
    rm -rf "$out"
}
run_torch() {
    say "torch round $1: sentence-transformers, $steps steps"
    "$py" "$helper" bench --student "$student" --teacher "$teacher" --pairs "$pairs" \
        --prefix "$prefix" --max-length "$seq_len" --expect-length "$seq_len" \
        --steps "$steps" --skip "$skip" --threads "$threads" --adamw "$adamw" | tail -n 1
}

xs=()
ts=()
check=()
for ((r = 1; r <= rounds; r++)); do
    j="$(run_xsent "$r")" || exit 1
    say "xsent round $r: $j"
    xs+=("$j")
    j="$(run_torch "$r")" || die "the torch benchmark failed (see above)"
    say "torch round $r: $j"
    ts+=("$j")
    if [ "$r" = 1 ]; then
        # The same computation, before any ratio: xsent's step-1 loss with dropout off against
        # torch's loss of the batch in eval mode before its first update (in torch round 1's JSON).
        run_xsent check --set distill.dropout=0.0 > /dev/null || exit 1
        rc=0
        c="$("$py" "$helper" check-loss --metrics "$work/check-metrics.jsonl" --torch "$j")" || rc=$?
        [ "$rc" = 0 ] || { say "loss check failed (above): no ratio"; exit "$rc"; }
        read -r -a check <<< "$c"
        say "loss check (dropout off, before any update): xsent ${check[0]}, torch ${check[1]}, relative ${check[2]}"
    fi
done

cores_after="$("$py" "$embed_helper" cpu-check)" || die "the core check failed"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

"$py" "$helper" report --batch "$batch" --length "$seq_len" --steps "$steps" --skip "$skip" \
    --threads "$threads" --cores "$cores_before" "$cores_after" \
    --load "$load_before" "$load_after" --nproc "$(nproc)" --pairs-info "$pj" \
    --xsent "${xs[@]}" --torch "${ts[@]}" --check-loss "${check[@]}" || die "could not write the report (see above)"
bench_provenance "$xsent"

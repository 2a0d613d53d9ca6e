#!/usr/bin/env bash
# Training cost of the lightweight dual transformer against its depth (seed 001 Table 5: memory
# and training time per 10,000 steps for 1, 2, 3, 4 and 6 layers, batch 128, one V100).
#
# For each depth, one `xsent train --config configs/lightweight.toml` process runs STEPS
# optimiser steps (batch 128 pairs, UGT + align + sim, the CPU-scale data) with validation and
# checkpoints off; this prints its peak resident memory (the whole process: data, vocabulary,
# weights, optimiser state, activations) and the mean step time of the steps after the first
# WARMUP, scaled to 1,000 steps, with each depth's ratio to the 2-layer model beside the paper's
# ratios. All depths run in this one invocation on the same machine, one after another.
#
# usage: scripts/bench-layers.sh [STEPS] [LAYERS...]
#   STEPS   optimiser steps per depth (default 40; the first 5 are not timed)
#   LAYERS  depths to measure (default 1 2 4 6)
# Environment: XSENT_THREADS (default all cores), CARGO_TARGET_DIR, XSENT_BIN (an xsent binary to
# time instead of building this checkout's: to compare two builds side by side).
# It measures xsent alone; the "÷ 2-layer" columns are ratios within this run, and the paper's
# ratios beside them come from a V100 (another machine): they compare shapes, not speeds. The
# output names the machine, the binary and this checkout's commit. A failed run or a missing
# step time stops it (exit 1).
set -euo pipefail
export LC_ALL=C.UTF-8
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=lib/bench-common.sh
. "$repo/scripts/lib/bench-common.sh"
bench_name=bench-layers
steps="${1:-40}"
shift || true
layers=("$@")
[ ${#layers[@]} -gt 0 ] || layers=(1 2 4 6)
warmup=5
[ "$steps" -gt "$warmup" ] || { echo "bench-layers: STEPS must be more than $warmup" >&2; exit 1; }
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
if [ -n "${XSENT_BIN:-}" ]; then
  bin="$XSENT_BIN"
  [ -x "$bin" ] || { echo "bench-layers: XSENT_BIN=$bin is not an executable" >&2; exit 1; }
else
  cargo build --release --quiet --bin xsent
  bin="$CARGO_TARGET_DIR/release/xsent"
fi
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
common=(--set "train.max_steps=$steps" --set train.eval_every=0 --set train.eval_at_start=false
        --set train.checkpoint_every=0 --set train.log_every=1 --set data.val_size=100)
# One vocabulary for every depth (learned once, by the first run).
tok=""
bench_provenance "$bin"
echo "threads: XSENT_THREADS=${XSENT_THREADS:-unset (all $(nproc) cores)}; load average: $(bench_load)"
echo "cores: $(nproc); $steps steps per depth, the first $warmup untimed; batch 128 pairs"
printf '| layers | parameters | peak RSS (MB) | s / step | min / 1,000 steps | RSS ÷ 2-layer | time ÷ 2-layer | paper M (MB) | paper T (min / 10k steps) | paper M ratio | paper T ratio |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
declare -A rss sps params
for n in "${layers[@]}"; do
  out="$tmp/l$n"
  extra=(--set "lightweight.layers=$n")
  [ -n "$tok" ] && extra+=(--set "lightweight.tokenizer=\"$tok\"")
  /usr/bin/time -f "%M" -o "$tmp/rss$n" "$bin" train --config configs/lightweight.toml --out "$out" "${common[@]}" "${extra[@]}" 2> "$tmp/log$n" \
    || { echo "bench-layers: the $n-layer run failed:" >&2; tail -n 20 "$tmp/log$n" >&2; exit 1; }
  [ -n "$tok" ] || { tok="$tmp/tokenizer.json"; cp "$out/init/tokenizer.json" "$tok"; }
  rss[$n]=$(awk '{ printf "%.0f", $1 / 1024 }' "$tmp/rss$n")
  sps[$n]=$(grep '"step_s"' "$out/metrics.jsonl" | sed 's/.*"step_s":\([0-9.e-]*\).*/\1/' \
    | awk -v w="$warmup" 'NR > w { s += $1; c++ } END { if (c) printf "%.4f", s / c }')
  params[$n]=$(grep -o '[0-9.]*M parameters' "$tmp/log$n" | head -n1 | sed 's/ parameters//')
  bench_pos "the $n-layer run's mean step time" "${sps[$n]}"
  bench_pos "the $n-layer run's peak RSS" "${rss[$n]}"
done
# Seed 001 Table 5 (en-fr, batch 128, one V100): layers → memory MB, minutes per 10,000 steps.
declare -A pm=([1]=7135 [2]=11607 [3]=16804 [4]=21923 [6]=28024) pt=([1]=19 [2]=24 [3]=29 [4]=34 [6]=44)
ref="${rss[2]:-}"; reft="${sps[2]:-}"
for n in "${layers[@]}"; do
  awk -v n="$n" -v p="${params[$n]}" -v r="${rss[$n]}" -v s="${sps[$n]}" -v r2="$ref" -v s2="$reft" \
      -v pm="${pm[$n]:-}" -v pt="${pt[$n]:-}" -v pm2="${pm[2]}" -v pt2="${pt[2]}" 'BEGIN {
    rr = (r2 == "") ? "–" : sprintf("%.2f", r / r2); tr = (s2 == "") ? "–" : sprintf("%.2f", s / s2)
    pmr = (pm == "") ? "–" : sprintf("%.2f", pm / pm2); ptr = (pt == "") ? "–" : sprintf("%.2f", pt / pt2)
    printf "| %d | %s | %d | %.3f | %.1f | %s | %s | %s | %s | %s | %s |\n", n, p, r, s, s * 1000 / 60, rr, tr, (pm == "" ? "–" : pm), (pt == "" ? "–" : pt), pmr, ptr
  }'
done
echo
echo "Peak RSS is the whole process (GPU memory in the paper); time is wall-clock per optimiser step on this CPU."

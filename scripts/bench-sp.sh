#!/usr/bin/env bash
# Encoding speed of a paraphrastic averaging model (seed 002 Table 4: 855,571 sentences/s for
# SP 20k dim 300 on a Quadro GP100 GPU, batches of 128), on 128,000 English sentences, measured
# two ways side by side in one run: from unit ids already in memory (as the paper timed it) and
# end to end from text (tokenizing + averaging + normalising), plus the tokenizing part alone
# and the whole `xsent embed` command (reading stdin, writing raw f32 to /dev/null).
#
# usage: scripts/bench-sp.sh [MODEL_DIR] [ROUNDS]
#   MODEL_DIR  an averaging model (default runs/sp/final, from configs/sp.toml)
#   ROUNDS     best of this many timings (default 5)
#
# Sentences: the English side of Multi30k train and the English XNLI premises/hypotheses
# (dev + test), distinct lines, cycled to 128,000 (training data, not a test set).
# Threads: XSENT_THREADS (default: all cores). Environment: XSENT_DATA (default ../shared/data).
set -euo pipefail
export LC_ALL=C.UTF-8
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
model="${1:-runs/sp/final}"
rounds="${2:-5}"
data="${XSENT_DATA:-$repo/../shared/data}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
[ -f "$model/xsent.json" ] || { echo "bench-sp: $model is not a model directory (train one: xsent train --config configs/sp.toml)" >&2; exit 1; }
cargo build --release --quiet --example bench_sp --bin xsent
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
{ zcat "$data/parallel/multi30k/train.en.gz"; cut -f1,2 "$data/xnli/dev-en.tsv" "$data/xnli/test-en.tsv" | tr '\t' '\n'; } \
  | awk 'length($0) > 0 && !seen[$0]++' > "$tmp/distinct.txt"
awk -v n=128000 '{ a[NR] = $0 } END { for (i = 0; i < n; i++) print a[i % NR + 1] }' "$tmp/distinct.txt" > "$tmp/sent.txt"
echo "cores: $(nproc); distinct sentences: $(wc -l < "$tmp/distinct.txt"), cycled to $(wc -l < "$tmp/sent.txt")"
"$CARGO_TARGET_DIR/release/examples/bench_sp" "$model" "$tmp/sent.txt" 128000 "$rounds"
best=""
for _ in $(seq "$rounds"); do
  s=$( { /usr/bin/time -f "%e" "$CARGO_TARGET_DIR/release/xsent" embed --model "$model" --input "$tmp/sent.txt" --format f32 -o /dev/null; } 2>&1 >/dev/null | tail -n1 )
  if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN { exit !(a < b) }'; then best="$s"; fi
done
awk -v s="$best" 'BEGIN { printf "| xsent embed command (load, read, embed, write f32) | %.2f | %.0f |\n", s, 128000 / s }'

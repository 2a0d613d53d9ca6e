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
# Threads: XSENT_THREADS (default: all cores); the output prints the setting it ran with.
# Environment: XSENT_DATA (default ../shared/data). It measures xsent alone: no ratio is printed
# (the paper's figure is from another machine and year, a GPU: not a side-by-side peer).
# A failed xsent run stops the script with xsent's message (exit 1).
set -euo pipefail
export LC_ALL=C.UTF-8
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=lib/bench-common.sh
. "$repo/scripts/lib/bench-common.sh"
bench_name=bench-sp
model="${1:-runs/sp/final}"
rounds="${2:-5}"
data="${XSENT_DATA:-$repo/../shared/data}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
[ -f "$model/xsent.json" ] || die "$model is not a model directory (train one: xsent train --config configs/sp.toml)"
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is needed"
cargo build --release --quiet --example bench_sp --bin xsent || die "cargo build failed"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
{ zcat "$data/parallel/multi30k/train.en.gz"; cut -f1,2 "$data/xnli/dev-en.tsv" "$data/xnli/test-en.tsv" | tr '\t' '\n'; } \
  | awk 'length($0) > 0 && !seen[$0]++' > "$tmp/distinct.txt"
awk -v n=128000 '{ a[NR] = $0 } END { for (i = 0; i < n; i++) print a[i % NR + 1] }' "$tmp/distinct.txt" > "$tmp/sent.txt"
bench_provenance "$CARGO_TARGET_DIR/release/xsent" "$CARGO_TARGET_DIR/release/examples/bench_sp"
echo "threads: XSENT_THREADS=${XSENT_THREADS:-unset (all $(nproc) cores)}; load average: $(bench_load)"
echo "distinct sentences: $(wc -l < "$tmp/distinct.txt"), cycled to $(wc -l < "$tmp/sent.txt")"
"$CARGO_TARGET_DIR/release/examples/bench_sp" "$model" "$tmp/sent.txt" 128000 "$rounds"
best=""
for _ in $(seq "$rounds"); do
  /usr/bin/time -f "%e" -o "$tmp/time" "$CARGO_TARGET_DIR/release/xsent" embed --model "$model" --input "$tmp/sent.txt" \
      --format f32 -o /dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; die "xsent embed failed (its message above)"; }
  s="$(tail -n1 "$tmp/time")"
  bench_pos "the xsent embed command's seconds" "$s"
  if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN { exit !(a < b) }'; then best="$s"; fi
done
awk -v s="$best" 'BEGIN { printf "| xsent embed command (load, read, embed, write f32) | %.2f | %.0f |\n", s, 128000 / s }'
echo "load average after: $(bench_load)"

#!/usr/bin/env bash
# End-to-end test of scripts/ray/xsent_ray.py: a local Ray cluster on 127.0.0.1 with 2 worker
# slots embeds, indexes and mines XNLI dev premises (en and de, distinct lines; non-test text)
# in --shards shards per side; one embedding task's xsent is killed (kill -9) midway and Ray
# retries it. The mined TSV, and each side's merged embedding, must equal a single-process run
# of the same steps (xsent embed, index build, index search, mine --src-knn) byte for byte.
#
# usage: scripts/ray/test.sh [--lines N] [--shards N]    (default 1500 lines a side, 4 shards)
#
# Environment: XSENT_BIN (default: cargo build --release, $CARGO_TARGET_DIR/release/xsent),
# XSENT_MODELS (models/), XSENT_DATA (../shared/data), XSENT_CACHE (~/.cache/xsent: the Ray venv
# of scripts/ray/setup.sh). Prints the seconds it took (venv set-up excluded).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
lines=1500
shards=4
while [ $# -gt 0 ]; do
    case "$1" in
        --lines) lines="$2"; shift 2 ;;
        --shards) shards="$2"; shift 2 ;;
        *) echo "ray test: unknown argument $1" >&2; exit 64 ;;
    esac
done
say() { printf 'ray test: %s\n' "$*" >&2; }
die() { printf 'ray test: FAILED: %s\n' "$*" >&2; exit 1; }

py="$("$root/scripts/ray/setup.sh")"
if [ -z "${XSENT_BIN:-}" ]; then
    (cd "$root" && cargo build --release --quiet) || die "cargo build failed"
    XSENT_BIN="${CARGO_TARGET_DIR:-$root/target}/release/xsent"
fi
model="${XSENT_MODELS:-$root/models}/multilingual-e5-small"
data="${XSENT_DATA:-$root/../shared/data}"
[ -d "$model" ] || die "no model at $model (scripts/setup.sh makes it)"
export RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0
start=$(date +%s)

work="$(mktemp -d)"
driver=
cleanup() {
    # The driver stops its local Ray when it ends; end it (by its id) if it still runs.
    [ -z "$driver" ] || kill "$driver" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
for l in en de; do
    awk -F'\t' -v n="$lines" '{ s = $1; sub(/\r$/, "", s) } s ~ /[^ ]/ && !seen[s]++ { print s; if (++c == n) exit }' "$data/xnli/dev-$l.tsv" > "$work/$l.txt"
done
say "$(wc -l < "$work/en.txt") en and $(wc -l < "$work/de.txt") de lines, $shards shards a side"

# ---- Ray run, with one embedding task killed midway -------------------------------------
"$py" "$root/scripts/ray/xsent_ray.py" --xsent "$XSENT_BIN" --model "$model" --src "$work/de.txt" --tgt "$work/en.txt" \
    --work "$work/ray" -o "$work/ray/mined.tsv" --shards "$shards" --local-cpus 2 --max-retries 2 > "$work/driver.log" 2>&1 &
driver=$!
# Midway: an embedding task whose xsent has run for 2 s (its model loaded, lines in progress).
victim=
killed=
for _ in $(seq 1 3000); do
    kill -0 "$driver" 2>/dev/null || break
    for f in "$work"/ray/running/embed-*.pid; do
        [ -s "$f" ] || continue
        if [ $(( $(date +%s) - $(stat -c %Y "$f") )) -ge 2 ]; then
            pid="$(cat "$f")"
            if kill -9 "$pid" 2>/dev/null; then
                killed="$pid"
                victim="$(basename "$f" .pid)"
                break 2
            fi
        fi
    done
    sleep 0.2
done
[ -n "$killed" ] || { cat "$work/driver.log" >&2; die "found no running embedding task to kill"; }
say "killed $victim (xsent pid $killed) midway"
wait "$driver" || { cat "$work/driver.log" >&2; die "the Ray driver failed"; }
driver=
ray_s=$(( $(date +%s) - start ))
attempts="$(grep -c '^\$ ' "$work/ray/logs/$victim.log")"
[ "$attempts" -ge 2 ] || die "$victim ran $attempts time(s): no retry after the kill"
say "Ray run done in ${ray_s} s; $victim ran $attempts times"

# ---- the same steps in one process each, unsharded ---------------------------------------------
ref="$work/ref"
mkdir -p "$ref"
for side in de en; do
    "$XSENT_BIN" embed --model "$model" --input "$work/$side.txt" --format npy -o "$ref/$side.npy" 2>> "$ref/log"
    "$XSENT_BIN" index build --vectors "$ref/$side.npy" --codec f32 --seed 0 -o "$ref/$side.ivf" 2>> "$ref/log"
done
"$XSENT_BIN" index search --index "$ref/en.ivf" --queries "$ref/de.npy" -k 4 --nprobe 64 -o "$ref/de.knn.npy" 2>> "$ref/log"
"$XSENT_BIN" index search --index "$ref/de.ivf" --queries "$ref/en.npy" -k 4 --nprobe 64 -o "$ref/en.knn.npy" 2>> "$ref/log"
"$XSENT_BIN" mine --src-file "$work/de.txt" --tgt-file "$work/en.txt" --src-knn "$ref/de.knn.npy" --tgt-knn "$ref/en.knn.npy" \
    --k 4 -o "$ref/mined.tsv" 2>> "$ref/log"

for pair in "src de" "tgt en"; do
    set -- $pair
    "$XSENT_BIN" embed --merge "$work/ray/$1/emb" -o "$work/merged-$2.npy" 2>> "$ref/log"
    cmp -s "$work/merged-$2.npy" "$ref/$2.npy" || die "the merged $2 shards differ from the single embedding"
done
cmp -s "$work/ray/mined.tsv" "$ref/mined.tsv" || { diff <(head -n 20 "$work/ray/mined.tsv") <(head -n 20 "$ref/mined.tsv") >&2 || true; die "the mined pairs differ from the single-process run"; }
pairs="$(wc -l < "$ref/mined.tsv")"
total=$(( $(date +%s) - start ))
say "PASSED: $pairs mined pairs and both embeddings equal the single-process run byte for byte"
echo "ray test: ${total} s in all (Ray run ${ray_s} s, single-process run $(( total - ray_s )) s)"

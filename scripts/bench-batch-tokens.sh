#!/usr/bin/env bash
# What --max-batch-tokens changes: time and peak memory of `xsent embed` at several token
# bounds, side by side in one run, against no bound (1,000,000 tokens: batches bounded by
# --batch-size alone, as before the flag), on
#   - tatoeba: 2,000 Tatoeba sentences (first 1,000 lines of tatoeba.deu-eng.eng and .deu, the
#     set of bench-embed.sh), at --batch-size 64 (the default) and 2048;
#   - long: lines that reach the model's maximum length (240 words for MiniLM's 256 tokens,
#     600 for e5's 512), 128 of them for MiniLM and 64 for e5, at --batch-size 64.
# Each cell is the best wall time of --repeat runs and the largest peak RSS (GNU time's %M);
# the vectors of every bound are checked to equal the unbounded run's within 1e-5.
# "vs no bound" = the bound's seconds ÷ the unbounded run's (below 1: the bound is faster).
# xsent alone; the output names the machine, the binary and this checkout's commit. A failed
# run or a time that is not a number above 0 stops it (exit 1).
#
# usage: scripts/bench-batch-tokens.sh [--models e5|minilm|all] [--repeat N] [--bounds "A B C"]
#
# Environment: XSENT_BIN, XSENT_MODELS, XSENT_DATA as in bench-embed.sh; XSENT_THREADS
# (default 2).
set -euo pipefail
# shellcheck source=lib/bench-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh"
bench_init bench-batch-tokens
models_arg=all
repeat=3
bounds="2048 4096 8192 16384"
while [ $# -gt 0 ]; do
    case "$1" in
        --models) models_arg="${2:-}"; shift 2 ;;
        --repeat) repeat="${2:-}"; shift 2 ;;
        --bounds) bounds="${2:-}"; shift 2 ;;
        -h|--help) bench_help; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done
bench_models "$models_arg" minilm e5
bench_positive_int --repeat "$repeat"
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is needed for the peak RSS"

bench_threads "${XSENT_THREADS:-2}"
# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"
find_xsent "$root"
"$xsent" embed --help | grep -q -- --max-batch-tokens || die "$xsent has no --max-batch-tokens"
bench_check_models

long_words() { case "$1" in e5) echo 600 ;; minilm) echo 240 ;; esac; }
long_lines() { case "$1" in e5) echo 64 ;; minilm) echo 128 ;; esac; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench_tatoeba_input "$work" 1000
mv "$input" "$work/tatoeba.txt"
# Long lines: the words of Tatoeba's English sides, in order, cut into lines of N words.
long_input() {
    local words="$1" lines="$2"
    # head ends the pipe early: the writers' SIGPIPE is no failure here.
    set +o pipefail
    cat "$data"/tatoeba/tatoeba.*-eng.eng | tr -s ' \t' '\n\n' | grep -v '^$' | head -n $((words * lines)) \
        | awk -v w="$words" '{ printf "%s%s", $0, (NR % w == 0 ? "\n" : " ") }'
    set -o pipefail
}

# run NAME MODEL INPUT BATCH BOUND: prints "seconds peak_mb"
run() {
    local model="$1" input="$2" batch="$3" bound="$4" out="$5" best="" peak=0 i s m
    for ((i = 0; i < repeat; i++)); do
        /usr/bin/time -f '%e %M' -o "$work/time" "$xsent" embed --model "$model" --input "$input" --batch-size "$batch" \
            --max-batch-tokens "$bound" --format f32 -o "$out" 2> "$work/log" || { cat "$work/log" >&2; die "xsent embed failed"; }
        s="" m=""
        read -r s m < "$work/time" || true
        bench_pos "xsent embed's seconds" "$s"
        [[ "$m" =~ ^[0-9]+$ ]] || die "xsent embed's peak RSS is '$m', not a number"
        best="$(awk -v a="$best" -v b="$s" 'BEGIN { if (a == "" || b < a) print b; else print a }')"
        [ "$m" -gt "$peak" ] && peak="$m"
    done
    echo "$best $((peak / 1024))"
}

# same A B: the largest difference between two f32 files of equal length
maxdiff() {
    python3 - "$1" "$2" <<'EOF'
import struct, sys
a, b = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read()
assert len(a) == len(b), "different lengths"
n = len(a) // 4
x, y = struct.unpack(f'<{n}f', a), struct.unpack(f'<{n}f', b)
print(max(abs(p - q) for p, q in zip(x, y)))
EOF
}

echo "## --max-batch-tokens: time and peak memory of xsent embed ($XSENT_THREADS threads)"
echo
bench_provenance "$xsent"
echo "load average before: $(bench_load)"
echo
echo "| model | input | --batch-size | --max-batch-tokens | seconds (best of $repeat) | vs no bound | peak RSS MB | max abs diff |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for k in "${keys[@]}"; do
    dir="$models/$(model_name "$k")"
    [ -f "$dir/model.safetensors" ] || die "model $dir is missing: run scripts/setup.sh first"
    long_input "$(long_words "$k")" "$(long_lines "$k")" > "$work/long-$k.txt"
    for spec in "tatoeba 64" "tatoeba 2048" "long-$k 64"; do
        read -r name batch <<<"$spec"
        input="$work/$name.txt"
        base_s="" base_mb=""
        read -r base_s base_mb < <(run "$dir" "$input" "$batch" 1000000 "$work/none.f32") || true
        bench_pos "$(model_name "$k") $name unbounded seconds" "$base_s"
        for bound in $bounds 1000000; do
            if [ "$bound" = 1000000 ]; then
                s="$base_s"; mb="$base_mb"; diff=0; label="none (1000000)"
            else
                s="" mb=""
                read -r s mb < <(run "$dir" "$input" "$batch" "$bound" "$work/b.f32") || true
                bench_pos "$(model_name "$k") $name bound $bound seconds" "$s"
                diff="$(maxdiff "$work/none.f32" "$work/b.f32")" || die "comparing the vectors of bound $bound failed"
                bench_num "max abs diff of bound $bound" "$diff"
                label="$bound"
            fi
            ratio="$(awk -v a="$s" -v b="$base_s" 'BEGIN { printf "%.2f", a / b }')"
            echo "| $(model_name "$k") | ${name%-"$k"} ($(wc -l < "$input") lines) | $batch | $label | $s | $ratio | $mb | $diff |"
            awk -v d="$diff" 'BEGIN { exit !(d > 1e-5) }' && die "bound $bound changed the vectors by $diff"
        done
    done
done
echo
echo "vs no bound: the bound's seconds ÷ the unbounded run's (below 1.00: the bound is faster)."
echo "load average after: $(bench_load)"

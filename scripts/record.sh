#!/usr/bin/env bash
# Make, or check, the record of a headline run (docs/results/protocol.md):
#
#   scripts/record.sh NAME...          train (if NAME trains) and evaluate into docs/results/runs/NAME/
#   scripts/record.sh --check NAME...  the same into a temporary folder, then compare with the
#                                      committed record (metrics.jsonl and every eval score)
#   scripts/record.sh --list           the names
#
# A record holds the resolved config.toml, metrics.jsonl, the eval reports (eval-*.json.gz, with
# the per-item outcomes that `xsent eval --compare` reads) and RUN.md (commands, commit, machine,
# wall times). Models and weights stay in the run directory under ${XSENT_RUNS:-runs}/record-NAME.
#
# Environment: XSENT_BIN (the binary; default: the release build, built if missing), XSENT_DATA
# (default ../shared/data), XSENT_MODELS (default models/), XSENT_RUNS (default runs/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf 'record: %s\n' "$*" >&2; }
# A command or table as the record shows it: paths inside the checkout relative to it, the data
# folder as $XSENT_DATA, so records made in different folders read the same.
rel() { sed -e "s#$root/##g" -e "s#$data/#\$XSENT_DATA/#g"; }
die() { printf 'record: error: %s\n' "$*" >&2; exit 1; }
# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh"

data="${XSENT_DATA:-$root/../shared/data}"
models="${XSENT_MODELS:-$root/models}"
runs="${XSENT_RUNS:-$root/runs}"
export XSENT_DATA="$data"
e5="$models/multilingual-e5-small"
minilm="$models/all-MiniLM-L6-v2"
stsb="$data/sts/stsbenchmark"
dueam_langs="ara,bul,cmn,deu,ell,fra,hin,rus,spa,tha,tur,urd,vie"

# name -> "train args" (empty: no training) and the evaluations (one per line: a report name, then
# the eval arguments; MODEL stands for the model scored; BASE=NAME compares with that record's
# report of the same name).
names=(e5-small e5-small-4layers minilm distill distill-direct distill-bf16 dueam sp sp-random lightweight disentangle disentangle-paper)

train_args() {
    case "$1" in
        distill) echo "--config configs/distill.toml" ;;
        distill-direct) echo "--config configs/distill-direct.toml" ;;
        # bf16 training's cost (issue 41): the same run with train.precision = "bf16".
        distill-bf16) echo "--config configs/distill.toml --set train.precision=\"bf16\"" ;;
        dueam) echo "--config configs/dueam.toml" ;;
        sp) echo "--config configs/sp.toml" ;;
        sp-random) echo "--config configs/sp.toml --set sp.random=true" ;;
        lightweight) echo "--config configs/lightweight.toml" ;;
        disentangle) echo "--config configs/disentangle.toml" ;;
        disentangle-paper) echo "--config configs/disentangle.toml --set disentangle.reconstruction_weight=1 --set disentangle.meaning_lr_scale=1" ;;
        *) echo "" ;;
    esac
}

# The model a record scores (RUN: the run folder of a trained one), and its options.
model_of() {
    case "$1" in
        e5-small) echo "--model $e5 --prefix query:_" ;;
        e5-small-4layers) echo "--model $e5 --prefix query:_ --layers 4 --pooling mean --normalize --max-length 128" ;;
        minilm) echo "--model $minilm" ;;
        *) echo "--model $2/final" ;;
    esac
}

base_of() {
    case "$1" in
        distill | distill-direct | disentangle | disentangle-paper) echo e5-small ;;
        dueam) echo e5-small-4layers ;;
        distill-bf16) echo distill ;;
        sp) echo sp-random ;;
        *) echo "" ;;
    esac
}

evals_of() {
    local dev="sts --pairs $stsb/sts-dev.csv"
    case "$1" in
        e5-small | distill | distill-direct)
            printf '%s\n' "stsb-dev|$dev" "sts17|sts" "tatoeba|tatoeba" "bucc|bucc" "xsr|xsr --multi30k" ;;
        distill-bf16)
            printf '%s\n' "stsb-dev|$dev" "sts17|sts" "tatoeba|tatoeba" ;;
        e5-small-4layers | dueam)
            printf '%s\n' "stsb-dev|$dev" "sts17|sts" "tatoeba|tatoeba --langs $dueam_langs" "bucc|bucc" "xsr|xsr --multi30k" ;;
        minilm)
            printf '%s\n' "stsb|sts --pairs $stsb/sts-dev.csv --pairs $stsb/sts-test.csv" "sts17|sts" "tatoeba|tatoeba" ;;
        sp | sp-random)
            printf '%s\n' "stsb-dev|$dev" "sts17|sts" "tatoeba|tatoeba --langs deu,fra,ces,spa" "bucc|bucc" ;;
        lightweight)
            printf '%s\n' "stsb-dev|$dev" "xsr|xsr --multi30k" "tatoeba|tatoeba --langs deu,fra" "sts17|sts" ;;
        disentangle | disentangle-paper)
            printf '%s\n' "stsb-dev|$dev" "sts17|sts" ;;
        *) die "unknown record $1 (scripts/record.sh --list)" ;;
    esac
}

check=0
case "${1:-}" in
    --list) printf '%s\n' "${names[@]}"; exit 0 ;;
    --check) check=1; shift ;;
    "" | -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
esac
[ $# -gt 0 ] || die "give a record name (--list)"
find_xsent "$root"
command -v python3 >/dev/null || die "python3 is needed to compare records"

record_one() {
    local name="$1" dest="$2" run="$3"
    local t_args model base t0 t1 cmd line rname eargs extra
    t_args="$(train_args "$name")"
    model="$(model_of "$name" "$run" | sed 's/query:_/"query: "/')"
    base="$(base_of "$name")"
    mkdir -p "$dest"
    {
        echo "# Record $name"
        echo
        echo "- made by: \`scripts/record.sh $name\` ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
        echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock configs || echo ' (with uncommitted changes)')"
        echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no)"
        echo "- binary: $("$xsent" --version)"
        echo
        echo "## Commands"
        echo
    } > "$dest/RUN.md"
    if [ -n "$t_args" ]; then
        rm -rf "$run"
        cmd="xsent train $t_args --out $run"
        say "$cmd"
        t0=$(date +%s)
        # shellcheck disable=SC2086
        "$xsent" train $t_args --out "$run" 2> "$dest/train.log" || { tail -20 "$dest/train.log" >&2; die "training $name failed (log: $dest/train.log)"; }
        t1=$(date +%s)
        printf -- '- `%s` (%d s)\n' "$cmd" $((t1 - t0)) | rel >> "$dest/RUN.md"
        cp "$run/config.toml" "$dest/config.toml"
        [ -f "$run/metrics.jsonl" ] && cp "$run/metrics.jsonl" "$dest/metrics.jsonl"
    fi
    while IFS= read -r line; do
        rname="${line%%|*}"
        eargs="${line#*|}"
        extra=""
        if [ -n "$base" ] && [ -f "$(dirname "$dest")/$base/eval-$rname.json.gz" ]; then
            extra="--compare $(dirname "$dest")/$base/eval-$rname.json.gz"
        fi
        cmd="xsent eval $eargs $model $extra --report eval-$rname.json"
        say "$cmd"
        t0=$(date +%s)
        # shellcheck disable=SC2086
        eval "\"\$xsent\" eval $eargs $model $extra --report \"\$dest/eval-$rname.json\"" > "$dest/eval-$rname.md" 2> "$dest/eval-$rname.log" \
            || { tail -20 "$dest/eval-$rname.log" >&2; die "eval $rname of $name failed"; }
        t1=$(date +%s)
        gzip -n -f "$dest/eval-$rname.json"
        rm -f "$dest/eval-$rname.log"
        rel < "$dest/eval-$rname.md" > "$dest/eval-$rname.md.tmp" && mv "$dest/eval-$rname.md.tmp" "$dest/eval-$rname.md"
        printf -- '- `%s` (%d s)\n' "$cmd" $((t1 - t0)) | rel >> "$dest/RUN.md"
    done < <(evals_of "$name")
    {
        echo
        echo "Tables: eval-*.md. Reports: eval-*.json.gz (\`xsent eval ... --compare\` reads them)."
    } >> "$dest/RUN.md"
}

for name in "$@"; do
    evals_of "$name" > /dev/null
    if [ "$check" = 1 ]; then
        ref="$root/docs/results/runs/$name"
        [ -d "$ref" ] || die "no record of $name in $ref to check against"
        tmp="$(mktemp -d)"
        # The base's committed reports serve the comparison, as in the record.
        base="$(base_of "$name")"
        [ -n "$base" ] && [ -d "$root/docs/results/runs/$base" ] && cp -r "$root/docs/results/runs/$base" "$tmp/$base"
        record_one "$name" "$tmp/$name" "$tmp/run"
        python3 "$root/scripts/compare_records.py" "$ref" "$tmp/$name"
        rm -rf "$tmp"
    else
        record_one "$name" "$root/docs/results/runs/$name" "$runs/record-$name"
        say "recorded $name in docs/results/runs/$name"
    fi
done

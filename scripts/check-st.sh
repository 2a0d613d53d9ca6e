#!/usr/bin/env bash
# Do the model directories that `xsent train` writes load in sentence-transformers, and give the
# same vectors there as in xsent?
#
# For each recipe named (default all four) this trains a 2-step run of its CPU config
# into a scratch directory, embeds the same sentences with `xsent embed --model RUN/final` and
# with `SentenceTransformer(RUN/final)`'s `encode`, `encode_query` and `encode_document` in the
# benchmarks' torch venv, and prints per recipe the modules sentence-transformers loaded, its
# default prompt, and the smallest cosine and largest absolute difference between the two
# engines' vectors of each sentence (over the three ways of encoding):
#   distill      e5-small student with the fitted Dense projection, Normalize, prefix "query: "
#   dueam        e5-small's first 4 layers as the learner, Normalize, prefix "query: "
#   lightweight  a 2-layer BERT built from scratch by xsent, with its own tokenizer.json
#   sp           an averaging model of SentencePiece-style pieces: StaticEmbedding, Normalize
# The sentences: the first 25 XNLI dev hypotheses in en, de, ar, zh, hi and sw, and an empty line.
#
# usage: scripts/check-st.sh [distill] [dueam] [lightweight] [sp]
#
# Exit 2 if a recipe's smallest cosine is below CHECK_MIN_COS (default 0.9999), 1 on errors.
# Not part of the test suite: the torch venv is a 1.8 GB download (scripts/lib/torch-venv.sh).
#
# Environment:
#   XSENT_BIN     xsent binary (default: the release binary, built if missing)
#   XSENT_DATA    data dir holding xnli/, sts/ (default <repo>/../shared/data)
#   XSENT_CACHE   cache dir (default ~/.cache/xsent): the torch venv is $XSENT_CACHE/bench-venv
#   BENCH_TORCH_VERSION / BENCH_ST_VERSION  pinned versions when the venv is set up
#   CHECK_MIN_COS smallest acceptable cosine (default 0.9999)
set -euo pipefail
export LC_ALL=C

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf 'check-st: %s\n' "$*" >&2; }
die() { printf 'check-st: error: %s\n' "$*" >&2; exit 1; }

recipes=()
for a in "$@"; do
    case "$a" in
        distill|dueam|lightweight|sp) recipes+=("$a") ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "check-st: unknown recipe: $a (distill, dueam, lightweight or sp; try --help)" >&2; exit 64 ;;
    esac
done
[ "${#recipes[@]}" -gt 0 ] || recipes=(distill dueam lightweight sp)

data="${XSENT_DATA:-$root/../shared/data}"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
venv="$cache/bench-venv"
min_cos="${CHECK_MIN_COS:-0.9999}"
for f in xnli/dev-en.tsv sts/stsbenchmark/sts-dev.csv; do
    [ -f "$data/$f" ] || die "$data/$f not found (set XSENT_DATA)"
done
for m in multilingual-e5-small all-MiniLM-L6-v2; do
    [ -f "$root/models/$m/model.safetensors" ] || die "models/$m is missing: run scripts/setup.sh first"
done

# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"
find_xsent "$root"
# shellcheck source=lib/torch-venv.sh
. "$root/scripts/lib/torch-venv.sh" || die "cannot read $root/scripts/lib/torch-venv.sh"
ensure_torch_venv "$venv" "${BENCH_TORCH_VERSION:-2.15.0}" "${BENCH_ST_VERSION:-6.2.0}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
input="$work/sentences.txt"
for lang in en de ar zh hi sw; do
    [ -f "$data/xnli/dev-$lang.tsv" ] || die "$data/xnli/dev-$lang.tsv not found"
    # premise<TAB>hypothesis<TAB>label
    head -n 25 "$data/xnli/dev-$lang.tsv" | cut -f2
done > "$input"
echo "" >> "$input"
# A small scored-pairs file, so the run's one validation does not score all of STS-B dev.
head -n 20 "$data/sts/stsbenchmark/sts-dev.csv" > "$work/val-sts.csv"

# The recipe's config and the settings that make it a 2-step run.
train_args() {
    local common=(--set train.max_steps=2 --set train.eval_at_start=false --set train.eval_every=0
        --set train.checkpoint_every=0)
    case "$1" in
        distill) echo configs/distill-direct.toml "${common[@]}" --set data.sources.0.max_pairs=400 \
            --set data.val_size=20 --set distill.projection_fit_size=200 \
            --set "train.val_sts=\"$work/val-sts.csv\"" ;;
        dueam) echo configs/dueam.toml "${common[@]}" ;;
        lightweight) echo configs/lightweight.toml "${common[@]}" --set train.batch_size=16 ;;
        sp) echo configs/sp.toml "${common[@]}" ;;
    esac
}

status=0
printf '%-12s %-9s %-60s %-12s %-12s %s\n' recipe sentences "sentence-transformers modules" prompt "min cosine" "max |diff|"
for r in "${recipes[@]}"; do
    run="$work/run-$r"
    say "training $r (2 steps) into $run"
    # shellcheck disable=SC2046
    (cd "$root" && "$xsent" train --config $(train_args "$r") --out "$run") > "$work/$r.log" 2>&1 \
        || { tail -n 20 "$work/$r.log" >&2; die "xsent train ($r) failed"; }
    "$xsent" embed --model "$run/final" --input "$input" --format npy -o "$work/$r.npy" 2> "$work/$r.embed.log" \
        || { cat "$work/$r.embed.log" >&2; die "xsent embed ($r) failed"; }
    line="$("$venv/bin/python" "$root/scripts/check_st.py" "$run/final" "$input" "$work/$r.npy")" \
        || die "the sentence-transformers side failed for $r"
    IFS=$'\t' read -r n modules prompt cos diff <<<"$line"
    printf '%-12s %-9s %-60s %-12s %-12s %s\n' "$r" "$n" "$modules" "$prompt" "$cos" "$diff"
    awk -v c="$cos" -v m="$min_cos" 'BEGIN { exit !(c >= m) }' || { say "$r: min cosine $cos < $min_cos"; status=2; }
done
exit "$status"

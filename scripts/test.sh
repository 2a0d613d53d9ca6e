#!/usr/bin/env bash
# The test command: set up the real models (scripts/setup.sh), then run every test in release
# mode (debug-mode candle is 20-100x slower). Real-model tests never skip: without the models
# they fail and say to run setup.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"

# Formatting first: it takes a second and names the files to run `cargo fmt` on (rustfmt.toml).
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --check >/dev/null || { echo "test: the tree is not formatted: run cargo fmt (cargo fmt --check lists the changes)" >&2; exit 1; }
else
    echo "test: rustfmt is not installed (rustup component add rustfmt): formatting not checked" >&2
fi

scripts/setup.sh

# The .npy test checks that numpy itself loads xsent's output: a small venv with numpy.
if [ -z "${XSENT_PYTHON:-}" ]; then
    venv="$cache/test-venv"
    if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
        echo "test: creating $venv with numpy" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check numpy
    fi
    export XSENT_PYTHON="$venv/bin/python"
fi
export XSENT_DATA="${XSENT_DATA:-$root/../shared/data}"
export XSENT_FIXTURES="${XSENT_FIXTURES:-$root/../shared/fixtures}"

cargo test --release "$@"

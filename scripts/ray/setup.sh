#!/usr/bin/env bash
# Make the Python venv of scripts/ray/xsent_ray.py: $XSENT_CACHE/ray-venv (default
# ~/.cache/xsent/ray-venv) with the pinned Ray of scripts/ray/requirements.txt. Prints the
# venv's python. Installs only when `import ray` fails or the version differs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${XSENT_CACHE:-$HOME/.cache/xsent}/ray-venv"
want="$(sed -n 's/^ray==//p' "$here/requirements.txt")"
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" >&2
fi
if [ "$("$venv/bin/python" -c 'import ray; print(ray.__version__)' 2>/dev/null)" != "$want" ]; then
    echo "setup: installing ray==$want into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
fi
echo "$venv/bin/python"

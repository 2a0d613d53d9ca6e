#!/usr/bin/env bash
# The optimiser's share of a training step on an XLM-R-base-sized model (278M parameters):
# forward + backward of a batch (sharded over the cores like `xsent train`) vs the global
# gradient norm + fused in-place AdamW update, measured side by side in one run.
# Usage: scripts/bench-optimizer.sh [batch] [tokens] [steps]   (default 64 32 4)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "cores available: $(nproc); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo run --release --quiet --example bench_optimizer -- "${1:-64}" "${2:-32}" "${3:-4}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

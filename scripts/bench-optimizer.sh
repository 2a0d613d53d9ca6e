#!/usr/bin/env bash
# The optimiser's share of a training step on an XLM-R-base-sized model (278M parameters):
# forward + backward of a batch (sharded over the cores like `xsent train`) vs the global
# gradient norm + fused in-place AdamW update, measured side by side in one run.
# Usage: scripts/bench-optimizer.sh [batch] [tokens] [steps]   (default 64 32 4)
# It measures xsent alone (no peer, no ratio against one). The output names the machine (CPU
# model, family/model/stepping, flags), the example binary and this checkout's commit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib/bench-common.sh
. scripts/lib/bench-common.sh
bench_name=bench-optimizer
echo "cores available: $(nproc); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo run --release --quiet --example bench_optimizer -- "${1:-64}" "${2:-32}" "${3:-4}" || die "the bench_optimizer example failed"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
bench_provenance "${CARGO_TARGET_DIR:-target}/release/examples/bench_optimizer"

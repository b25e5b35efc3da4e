#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# Side-by-side benchmark: our echo (busy polling) vs DPDK's vhost PMD, same
# dpdk-testpmd virtio-user frontend, alternating runs, medians and ratio.
# Arguments go to the vs-dpdk program (see benches/src/bin/vs_dpdk.rs), e.g.
#   benches/vs-dpdk.sh --reps 5 --sizes 64,1514 --huge both --rings split,packed
# Needs root; installs the peers first. Takes about 20 s per run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-peers.sh
cargo build --release --workspace --examples
cargo build --release -p vhu-benches --bin vs-dpdk
# Where cargo put them (and where vs-dpdk looks for echo: $CARGO_TARGET_DIR).
target=${CARGO_TARGET_DIR:-target}
exec "$target/release/vs-dpdk" "$@"

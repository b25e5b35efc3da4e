#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# Two-port switch benchmark: one dpdk-testpmd with two virtio-user ports (io
# forward, each port addressed to the other, `start tx_first 32`, forwarding
# on CPU 1) through (a) `vhu-switch --poll busy --pmd-cpus 0`, (b) testpmd's
# vhost PMD cross-connect (net_vhost0 <-> net_vhost1, io forward: the
# no-switching ceiling) and (c) Open vSwitch with DPDK (one PMD on CPU 0,
# NORMAL), alternating ABC CBA ..., medians, ratios and each switch's busy
# cycles per frame; then the idle CPU of an adaptive switch with four
# connected, silent ports.
# Arguments go to the switch-bench program (benches/src/bin/switch_bench.rs), e.g.
#   benches/vs-switches.sh --reps 3 --sizes 64,1514
# Needs root and hugepages; installs the peers first (OVS-DPDK included).
# About 25 s per run. Hold the shared lock around it on a shared machine:
#   flock /tmp/vhu-e2e.lock benches/vs-switches.sh --reps 3
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-peers.sh
cargo build --release -p vhu-switch --bins
cargo build --release -p vhu-benches --bin switch-bench
target=${CARGO_TARGET_DIR:-target}
export VHU_SWITCH_BIN=${VHU_SWITCH_BIN:-$target/release/vhu-switch}
exec "$target/release/switch-bench" "$@"

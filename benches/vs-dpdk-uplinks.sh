#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# Uplink benchmark: frames per second from a dpdk-testpmd virtio-user
# frontend (txonly, 64 B) through a vhost-user backend into a veth peer (or a
# TAP) in a network namespace, counted by the peer interface. Ours is the
# `patch` example (--poll busy) on each uplink kind; the anchor is testpmd
# with net_vhost0 cross-connected (io forward) to DPDK's net_af_xdp,
# net_af_packet and net_tap PMDs. Alternating runs, medians and ratios.
# Arguments go to the uplink-bench program (benches/src/bin/uplink_bench.rs), e.g.
#   benches/vs-dpdk-uplinks.sh --reps 5 --uplinks af_xdp,af_packet --size 64
# Needs root; installs the peers first. About 12 s per run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-peers.sh
cargo build --release --workspace --examples
cargo build --release -p vhu-benches --bin uplink-bench
target=${CARGO_TARGET_DIR:-target}
exec "$target/release/uplink-bench" --patch "$target/release/examples/patch" "$@"

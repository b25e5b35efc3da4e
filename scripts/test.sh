#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# The whole test suite: the README's test command, and what .ci/run calls.
#
# Runs the quick check first (scripts/check.sh: formatting, lints, docs, unit
# and in-process driver tests, in release mode), installs every peer the
# tests use (scripts/install-peers.sh: DPDK testpmd, QEMU 10, the guest kernel
# and initramfs, hugepages), then runs the fuzz targets, the demo as a user
# runs it (scripts/demo.sh: two QEMU guests ping each other through
# vhu-switch), the end-to-end tests against real peers (QEMU guests,
# dpdk-testpmd, network namespaces) and a 60 s soak (scripts/soak.sh).
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh: needs root (peers, hugepages, network namespaces)" >&2
    exit 1
fi

step() { printf '\n==> %s\n' "$*"; }

step "quick check (scripts/check.sh --release)"
scripts/check.sh --release

step "installing peers"
scripts/install-peers.sh

step "build (release: binaries and examples)"
cargo build --release --workspace --bins --examples

step "fuzz targets: seed replay, then a 30 s libFuzzer run each"
(cd fuzz && cargo test --release)
fuzz/run.sh 30

# Ahead of the end-to-end tests, one at a time like them: the README's
# demo command, on the peers and binaries installed and built above.
step "demo: two QEMU guests ping each other through vhu-switch (scripts/demo.sh)"
scripts/demo.sh --no-install --no-build

step "end-to-end tests against real peers (serialised: they busy-poll)"
cargo test --release --no-fail-fast -p vhu-tests -- --include-ignored --test-threads=1

step "soak (60 s)"
scripts/soak.sh 60

echo "scripts/test.sh: all tests passed"

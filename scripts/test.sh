#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# The whole test suite: the README's test command, and what .ci/run calls.
#
# Installs every peer the tests use (scripts/install-peers.sh: DPDK testpmd,
# QEMU 10, the guest kernel and initramfs, hugepages), checks formatting and
# lints, then runs unit tests, in-process driver tests, and the end-to-end
# tests against real peers (QEMU guests, dpdk-testpmd). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh: needs root (peers, hugepages, network namespaces)" >&2
    exit 1
fi

step() { printf '\n==> %s\n' "$*"; }

step "installing peers"
scripts/install-peers.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

step "build (release, with examples)"
cargo build --release --workspace --examples

step "unit and in-process tests"
cargo test --release --no-fail-fast --workspace --all-features

step "fuzz targets: seed replay, then a 30 s libFuzzer run each"
(cd fuzz && cargo test --release)
fuzz/run.sh 30

step "end-to-end tests against real peers (serialised: they busy-poll)"
export VHU_E2E=1
cargo test --release --no-fail-fast -p vhu-tests -- --include-ignored --test-threads=1

echo "scripts/test.sh: all tests passed"

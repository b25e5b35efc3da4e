#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# The soak: scripts/soak.sh DURATION (seconds, or 60s, 5m, 30m).
#
# One vhu-switch (adaptive polling) under mixed traffic between four
# in-process virtio-net frontends and a host behind an AF_PACKET uplink,
# frontend reconnects, port add/delete and control-API reads for DURATION
# (tests/src/bin/soak.rs). It prints frames moved, drops by reason,
# reconnects, API requests, the switch's fds/shared mappings/RSS at start and
# end, and fails on any uncounted loss, corruption, crash or growth beyond the
# bound. Builds what is missing first; needs root. Run it under the e2e lock
# when other end-to-end tests may run: flock /tmp/vhu-e2e.lock scripts/soak.sh 60
# The exit status is the verdict.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ne 1 ]; then
    echo "usage: scripts/soak.sh DURATION (e.g. 60, 5m)" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "scripts/soak.sh: needs root (network namespaces, AF_PACKET)" >&2
    exit 1
fi
for tool in ip; do
    command -v "$tool" >/dev/null || {
        echo "scripts/soak.sh: $tool not found (scripts/install-peers.sh)" >&2
        exit 1
    }
done

# The switch under test and the soak itself (cargo rebuilds only what changed).
cargo build --release -p vhu-switch --bins
cargo build --release -p vhu-tests --bin soak
exec target/release/soak --duration "$1"

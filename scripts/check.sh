#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# The quick check to run before committing: formatting, lints, docs and the
# unit and in-process tests. Needs no root and no peers (the end-to-end tests
# are #[ignore]d here); scripts/test.sh runs it first.
#
#   scripts/check.sh            debug build of the tests (fastest to iterate)
#   scripts/check.sh --release  the tests in release mode, as CI runs them
set -euo pipefail
cd "$(dirname "$0")/.."

profile=()
case "${1:-}" in
    --release) profile=(--release) ;;
    "") ;;
    *) echo "usage: scripts/check.sh [--release]" >&2; exit 64 ;;
esac

step() { printf '\n==> %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "clippy (all targets, all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "rustdoc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

step "unit and in-process tests"
cargo test "${profile[@]}" --no-fail-fast --workspace --all-features

echo "scripts/check.sh: all checks passed"

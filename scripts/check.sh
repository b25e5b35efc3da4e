#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# The quick check to run before committing: formatting, lints, docs, the
# dependency policy (cargo deny, deny.toml) and the unit and in-process tests.
# Needs no root and no peers (the end-to-end tests are #[ignore]d here);
# scripts/test.sh runs it first. Installs cargo-deny (from crates.io, with
# its own lock file) when it is missing.
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

step "dependencies (cargo deny: deny.toml)"
if ! cargo deny --version >/dev/null 2>&1; then
    echo "cargo-deny is missing: cargo install --locked cargo-deny (a few minutes)"
    cargo install --locked cargo-deny
fi
# licenses, bans and sources need no network. advisories needs the RustSec
# database: fetched when the network allows (cargo deny fetch db), checked
# only against a copy on this machine, and said which.
cargo deny --locked check --hide-inclusion-graph licenses bans sources
timeout 120 cargo deny fetch db >/dev/null 2>&1 || true
advisory_db=""
for d in "${CARGO_HOME:-$HOME/.cargo}"/advisory-dbs/*/; do
    if [ -d "$d/crates" ]; then advisory_db=$d; break; fi
done
if [ -n "$advisory_db" ]; then
    echo "cargo deny: licenses, bans, sources and advisories (database ${advisory_db%/})"
    cargo deny --frozen check --hide-inclusion-graph advisories
else
    echo "cargo deny: licenses, bans, sources; advisories skipped: no RustSec database on this machine (cargo deny fetch db)"
fi

step "rustdoc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

step "unit and in-process tests"
cargo test "${profile[@]}" --no-fail-fast --workspace --all-features

echo "scripts/check.sh: all checks passed"

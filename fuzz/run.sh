#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#
# Builds every fuzz target and runs each for SECONDS (default 30).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Exits non-zero as soon as a target finds a crash (the input is saved in
# fuzz/artifacts/TARGET/). New corpus entries go to fuzz/corpus/TARGET
# (not committed); the committed seeds in fuzz/seeds/TARGET are read too.
# Only the stable toolchain is needed: RUSTC_BOOTSTRAP=1 unlocks the
# sanitizer flags cargo-fuzz passes. Extra libFuzzer flags can be given in
# FUZZ_ARGS (e.g. FUZZ_ARGS="-jobs=2 -workers=2").
set -euo pipefail

secs=${1:-30}
shift || true
cd "$(dirname "$0")"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

cargo fuzz build
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "seeds/$t"
    echo "=== $t: ${secs}s"
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags.
    if ! cargo fuzz run "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -timeout=60 -len_control=20 -print_final_stats=1 ${FUZZ_ARGS:-}; then
        echo "=== $t: FAILED (see fuzz/artifacts/$t/)" >&2
        exit 1
    fi
done
echo "=== all targets passed"

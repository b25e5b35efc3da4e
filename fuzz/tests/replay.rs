// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Runs the inputs named in `VHU_FUZZ_INPUT` (colon-separated paths) through
//! the `rings` harness, for triage without libFuzzer:
//! `VHU_FUZZ_TRACE=1 VHU_FUZZ_INPUT=artifacts/rings/crash-... cargo test --test replay -- --nocapture`.

#[test]
fn replay_inputs() {
    let Some(paths) = std::env::var_os("VHU_FUZZ_INPUT") else {
        return;
    };
    for p in std::env::split_paths(&paths) {
        let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        eprintln!("{}: {}", p.display(), vhu_fuzz::rings::summary(&b));
    }
}

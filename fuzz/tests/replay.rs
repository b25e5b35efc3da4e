// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A triage tool, not a check (hence `#[ignore]`d, so the suite does not
//! count it as a passing test): runs the inputs named in `VHU_FUZZ_INPUT`
//! (colon-separated paths) through the harness named in `VHU_FUZZ_TARGET`
//! (`rings` when unset; also `ring_differential`, `switching`, `vhost_user`, `wire`, `http`,
//! `cni`) without libFuzzer and prints what each did:
//! `VHU_FUZZ_TRACE=1 VHU_FUZZ_INPUT=artifacts/rings/crash-... cargo test --test replay -- --ignored --nocapture`.

#[test]
#[ignore = "triage tool: set VHU_FUZZ_INPUT and run with --ignored"]
fn replay_inputs() {
    let paths = std::env::var_os("VHU_FUZZ_INPUT")
        .expect("VHU_FUZZ_INPUT must name the inputs to replay (colon-separated paths)");
    let mut n = 0;
    for p in std::env::split_paths(&paths) {
        let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let target = std::env::var("VHU_FUZZ_TARGET").unwrap_or_else(|_| "rings".into());
        let what = match target.as_str() {
            "rings" => vhu_fuzz::rings::summary(&b),
            "ring_differential" => format!("{:?}", vhu_fuzz::ring_differential::outcome(&b)),
            "switching" => format!("{:?}", vhu_fuzz::switching::outcome(&b)),
            "vhost_user" => format!("{:?}", vhu_fuzz::vhost_user::outcome(&b)),
            "wire" => format!("{:?}", vhu_fuzz::wire::outcome(&b)),
            "http" => format!("{:?}", vhu_fuzz::http::answers(&b)),
            "cni" => format!("{:?}", vhu_fuzz::cni::outcome(&b)),
            "cni_node" => format!("{:?}", vhu_fuzz::cni_node::outcome(&b)),
            other => panic!("VHU_FUZZ_TARGET={other}: no such harness"),
        };
        eprintln!("{}: {what}", p.display());
        n += 1;
    }
    assert!(n > 0, "VHU_FUZZ_INPUT names no input");
}

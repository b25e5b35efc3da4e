// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vhu_fuzz::cni_node::run(data);
});

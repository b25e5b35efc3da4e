// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#![no_main]
use libfuzzer_sys::{fuzz_target, Corpus};

fuzz_target!(|data: &[u8]| -> Corpus {
    if vhu_fuzz::ring_differential::run(data) {
        Corpus::Keep
    } else {
        Corpus::Reject
    }
});

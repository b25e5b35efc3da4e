// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What every bench of this crate shares.

use std::time::Duration;

use criterion::Criterion;

/// Short warm-up and measurement: each bench is one burst, cheap to repeat,
/// and the machine is shared (medians over 20 samples).
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What the side-by-side benchmark programs (`src/bin/`) share: their exit
//! on a usage error and how they summarise repeated runs.

use std::process::ExitCode;

/// The parsed arguments, or exit status 64 (usage) after printing the
/// error as `program: error`.
///
/// # Errors
///
/// The exit code when `parsed` is an error.
pub fn args_or_usage<T>(program: &str, parsed: Result<T, String>) -> Result<T, ExitCode> {
    parsed.map_err(|e| {
        eprintln!("{program}: {e}");
        ExitCode::from(64)
    })
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The runs' figures with `decimals` digits, space-separated.
pub fn runs(v: &[f64], decimals: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.decimals$}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_runs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(runs(&[1.0, 2.25], 2), "1.00 2.25");
    }
}

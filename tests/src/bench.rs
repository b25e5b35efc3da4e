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

/// `VIRTIO_F_RING_PACKED` in the virtio feature bits.
pub const F_RING_PACKED: u64 = 1 << 34;

/// `VIRTIO_F_IN_ORDER` in the virtio feature bits.
pub const F_IN_ORDER: u64 = 1 << 35;

/// Checks that the features a run negotiated are those its row is labelled
/// with: packed rings exactly when `packed`, `IN_ORDER` as `in_order` asks
/// (`None`: the frontend's default, either is fine). Returns them.
///
/// # Errors
///
/// When they were not logged, or differ from the label.
pub fn check_features(
    features: Option<u64>,
    packed: bool,
    in_order: Option<bool>,
) -> Result<u64, String> {
    let f = features.ok_or("the frontend did not log its negotiated features")?;
    if (f & F_RING_PACKED != 0) != packed {
        return Err(format!(
            "negotiated features {f:#x}: RING_PACKED is {}, the row says {}",
            f & F_RING_PACKED != 0,
            if packed { "packed" } else { "split" }
        ));
    }
    if let Some(io) = in_order {
        if (f & F_IN_ORDER != 0) != io {
            return Err(format!(
                "negotiated features {f:#x}: IN_ORDER is {}, the row says in_order={}",
                f & F_IN_ORDER != 0,
                u8::from(io)
            ));
        }
    }
    Ok(f)
}

/// Checks that the frames a run measured averaged `size` bytes (every frame
/// of a run has the same length: anything else means other frames were
/// counted, or the frames were not the size the row says).
///
/// # Errors
///
/// When the average is off by more than half a byte.
pub fn check_frame_len(avg: f64, size: u16) -> Result<(), String> {
    if (avg - f64::from(size)).abs() > 0.5 {
        return Err(format!(
            "the frames averaged {avg:.2} bytes, the row says {size}"
        ));
    }
    Ok(())
}

/// Runs `run` up to `attempts` times, until `noise` finds nothing wrong with
/// its outcome (e.g. foreign CPU load or steal time above a threshold).
/// Returns the last outcome, and whether it is still noisy (to be marked).
///
/// # Errors
///
/// The first error of `run`.
pub fn quiet_run<T>(
    attempts: usize,
    mut run: impl FnMut() -> Result<T, String>,
    noise: impl Fn(&T) -> Option<String>,
) -> Result<(T, bool), String> {
    let mut attempt = 1;
    loop {
        let t = run()?;
        match noise(&t) {
            None => return Ok((t, false)),
            Some(why) if attempt >= attempts => {
                eprintln!("noisy run kept after {attempt} attempts: {why}");
                return Ok((t, true));
            }
            Some(why) => {
                eprintln!("noisy run repeated (attempt {attempt} of {attempts}): {why}");
                attempt += 1;
            }
        }
    }
}

/// The order of the two backends in repetition `rep`: A B, B A, A B, ...
/// (ABBA), so that drifts over time (thermal, other load) hit both alike.
pub fn abba<T: Copy>(rep: usize, a: T, b: T) -> [T; 2] {
    if rep.is_multiple_of(2) {
        [a, b]
    } else {
        [b, a]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_checks() {
        let split = 1 << 32;
        assert_eq!(check_features(Some(split), false, None), Ok(split));
        assert!(check_features(Some(split), true, None).is_err());
        assert!(check_features(None, false, None).is_err());
        let packed_io = split | F_RING_PACKED | F_IN_ORDER;
        assert!(check_features(Some(packed_io), true, Some(true)).is_ok());
        assert!(check_features(Some(packed_io), true, Some(false)).is_err());
        assert!(check_features(Some(packed_io), true, None).is_ok());
        assert!(check_frame_len(64.0, 64).is_ok());
        assert!(check_frame_len(63.2, 64).is_err());
        assert_eq!(abba(0, 1, 2), [1, 2]);
        assert_eq!(abba(1, 1, 2), [2, 1]);
        let mut n = 0;
        let r = quiet_run(
            3,
            || {
                n += 1;
                Ok(n)
            },
            |&n| (n < 2).then(|| "noisy".to_string()),
        );
        assert_eq!(r, Ok((2, false)));
        let r = quiet_run(2, || Ok(0), |_| Some("always".into()));
        assert_eq!(r, Ok((0, true)));
    }

    #[test]
    fn medians_and_runs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(runs(&[1.0, 2.25], 2), "1.00 2.25");
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What the side-by-side benchmark programs (`src/bin/`) share: their exit
//! on a usage error and how they summarise repeated runs.

use std::process::{Child, Command, ExitCode, ExitStatus};
use std::time::Duration;

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

/// A comma-separated list, each item parsed by `item`; errors name `flag`.
///
/// # Errors
///
/// The first item `item` refuses, as `flag: error`.
pub fn list<T>(
    flag: &str,
    v: &str,
    item: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    v.split(',')
        .map(|s| item(s).map_err(|e| format!("{flag}: {e}")))
        .collect()
}

/// `v` parsed as a number (or anything [`std::str::FromStr`]).
///
/// # Errors
///
/// The parse error, as text.
pub fn number<T: std::str::FromStr>(v: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    v.parse().map_err(|e: T::Err| format!("{v:?}: {e}"))
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

/// Spawns `cmd` as a child that gets SIGKILL when this thread exits, as
/// the peers of [`crate::testpmd`] do: a benchmark that dies leaves no
/// busy poller behind.
///
/// # Errors
///
/// Those of [`Command::spawn`].
pub fn spawn_tied(cmd: &mut Command) -> std::io::Result<Child> {
    crate::testpmd::kill_with_parent(cmd);
    cmd.spawn()
}

/// Waits up to `timeout` for `child` to exit.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    crate::testpmd::wait_timeout(child, timeout)
}

/// SIGTERM, up to `grace` for the exit, then SIGKILL; the exit status.
pub fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    crate::testpmd::terminate(child, grace)
}

/// Waits until the machine is at most `max_busy` busy (a fraction of all
/// CPUs, sampled over 1 s by [`crate::testpmd::machine_busy`]) or `wait` has
/// passed; returns the last sample. Other work on two cores takes cycles
/// straight out of the busy pollers, so a benchmark run starts on a quiet
/// machine when it can, and reports how busy it was when it cannot.
pub fn wait_for_quiet(max_busy: f64, wait: Duration) -> f64 {
    let give_up = std::time::Instant::now() + wait;
    loop {
        let busy = crate::testpmd::machine_busy(Duration::from_secs(1)).0;
        let late = std::time::Instant::now() >= give_up;
        if late || busy <= max_busy {
            return busy;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_runs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(runs(&[1.0, 2.25], 2), "1.00 2.25");
        assert_eq!(list("--n", "1,2", number::<u8>), Ok(vec![1, 2]));
        assert!(list("--n", "1,x", number::<u8>)
            .unwrap_err()
            .starts_with("--n: \"x\""));
    }
}

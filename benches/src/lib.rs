// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What the side-by-side benchmark programs (`src/bin/`: `vs-dpdk`,
//! `switch-bench`, `uplink-bench`) share: their exit on a usage error, how
//! they summarise repeated runs, and how they check the machine is quiet
//! and where the host put its two CPUs. The criterion benches live in
//! `benches/`.

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
/// the peers of [`vhu_tests::testpmd`] do: a benchmark that dies leaves no
/// busy poller behind.
///
/// # Errors
///
/// Those of [`Command::spawn`].
pub fn spawn_tied(cmd: &mut Command) -> std::io::Result<Child> {
    vhu_tests::process::kill_with_parent(cmd);
    cmd.spawn()
}

/// Waits up to `timeout` for `child` to exit.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    vhu_tests::process::wait_timeout(child, timeout)
}

/// SIGTERM, up to `grace` for the exit, then SIGKILL; the exit status.
pub fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    vhu_tests::process::terminate(child, grace)
}

/// Waits until the machine is at most `max_busy` busy (a fraction of all
/// CPUs, sampled over 1 s by [`vhu_tests::process::machine_busy`]) or `wait` has
/// passed; returns the last sample. Other work on two cores takes cycles
/// straight out of the busy pollers, so a benchmark run starts on a quiet
/// machine when it can, and reports how busy it was when it cannot.
pub fn wait_for_quiet(max_busy: f64, wait: Duration) -> f64 {
    let give_up = std::time::Instant::now() + wait;
    loop {
        let busy = vhu_tests::process::machine_busy(Duration::from_secs(1)).0;
        let late = std::time::Instant::now() >= give_up;
        if late || busy <= max_busy {
            return busy;
        }
    }
}

/// Round trips of one cache line between CPUs 0 and 1 that
/// [`core_to_core_ns`] times.
pub const C2C_TRIPS: u32 = 20_000;

/// Above this round trip (ns) the two CPUs are taken to be far apart.
pub const C2C_FAR_NS: f64 = 250.0;

/// The time, in ns, for one cache line to go from CPU 0 to CPU 1 and back
/// (two threads pinned there pass a flag, [`C2C_TRIPS`] times; the median
/// of five such batches).
///
/// This machine's two vCPUs are placed by the host: at times on cores
/// that share a cache (about 100 ns here), at times on distant ones
/// (400-550 ns), and it changes within seconds. Every frame a frontend on
/// one CPU hands a backend on the other crosses between them in several
/// cache lines, so a loop's rate follows this figure: the harnesses time
/// it before and after each window and report it beside the rate.
pub fn core_to_core_ns() -> f64 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    #[repr(align(128))]
    struct Line(AtomicU32);
    let mut batches = Vec::new();
    for _ in 0..5 {
        let line = Arc::new(Line(AtomicU32::new(0)));
        let peer = {
            let line = Arc::clone(&line);
            std::thread::spawn(move || {
                let _ = vhost_net_backend::sys::pin_current_thread(1);
                for i in 0..C2C_TRIPS {
                    while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                        std::hint::spin_loop();
                    }
                    line.0.store(2 * i + 2, Ordering::Release);
                }
            })
        };
        let me = std::thread::spawn(move || {
            let _ = vhost_net_backend::sys::pin_current_thread(0);
            let t = std::time::Instant::now();
            for i in 0..C2C_TRIPS {
                line.0.store(2 * i + 1, Ordering::Release);
                while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            t.elapsed()
        });
        let took = me.join().expect("the timing thread");
        peer.join().expect("the peer thread");
        batches.push(took.as_secs_f64() * 1e9 / f64::from(C2C_TRIPS));
    }
    median(&batches)
}

/// Steps of the fixed integer loop that [`core_speed_ns`] times per batch.
const SPEED_STEPS: u64 = 1_000_000;

/// How long CPU `cpu` takes, in ns per 1000 steps, for a fixed loop of
/// integer multiplies, rotates and adds (four chains, each step waiting on
/// the last: about 4 cycles a step); the median of five batches. It reads
/// what the host lends that CPU at the moment: its clock, and a busy
/// hyperthread sibling, which this machine's counters cannot show. The
/// harnesses time it on both CPUs before and after each window, beside
/// [`core_to_core_ns`], so that a run slower than its neighbours says
/// whether the host's CPU was slower too
/// (`docs/perf/fast-path-2026-12-05-to-06.md`, "The CPUs' speed beside each
/// run").
pub fn core_speed_ns(cpu: usize) -> f64 {
    std::thread::spawn(move || {
        let _ = vhost_net_backend::sys::pin_current_thread(cpu);
        let mut batches = Vec::new();
        for _ in 0..5 {
            let t = std::time::Instant::now();
            std::hint::black_box(speed_loop(std::hint::black_box(SPEED_STEPS)));
            batches.push(t.elapsed().as_secs_f64() * 1e9 / (SPEED_STEPS as f64 / 1000.0));
        }
        median(&batches)
    })
    .join()
    .expect("the timing thread")
}

/// The loop [`core_speed_ns`] times: each chain's next value depends on its
/// last, so the compiler can neither vectorise nor shorten it.
fn speed_loop(steps: u64) -> u64 {
    let (mut a, mut b, mut c, mut d) = std::hint::black_box((1u64, 2u64, 3u64, 4u64));
    for i in 0..steps {
        a = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i;
        b = b.rotate_left(7).wrapping_add(a);
        c = c.wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ b;
        d = d.rotate_right(11) ^ c;
    }
    a ^ b ^ c ^ d
}

/// How a run's two [`core_to_core_ns`] readings (before and after its
/// window) place the CPUs: `near`, `far`, or `moved` when they disagree.
pub fn placement(before: f64, after: f64) -> &'static str {
    match (before > C2C_FAR_NS, after > C2C_FAR_NS) {
        (false, false) => "near",
        (true, true) => "far",
        _ => "moved",
    }
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
        assert_eq!(list("--n", "1,2", number::<u8>), Ok(vec![1, 2]));
        assert!(list("--n", "1,x", number::<u8>)
            .unwrap_err()
            .starts_with("--n: \"x\""));
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Hostile guests against a running `vhu-switch` (the release binary, one
//! PMD thread for every port, adaptive polling).
//!
//! Port `a` streams numbered frames to port `b` (in lock-step with `b`'s
//! receive ring) and a few to port `h`; all are the library's in-process
//! virtio-net driver. On `h`, a hostile guest replays one malformed-ring
//! scenario after another: descriptors outside guest memory or 4 GiB long,
//! loops, `next` and heads outside the ring, writable buffers in TX chains,
//! nested and malformed indirect tables, empty and oversized frames, too
//! many segments, chains into memory the frontend truncated away from its
//! memory file under the switch's mapping (a SIGBUS the switch recovers
//! from: the pages read as zeros), read-only and unmapped RX buffers, and
//! at the end an avail index more than a ring ahead. For each scenario:
//!
//! - every malformed chain `h` published is dropped and counted exactly,
//!   by its reason, and returned to `h` in its used ring (length 0) unless
//!   its head is outside the ring; nothing of it reaches any port (`z`,
//!   the destination its frames name, receives nothing);
//! - the `a` -> `b` rate, in 200 ms windows alternating between `h` quiet
//!   and `h` attacking (32 malformed chains a millisecond), stays within
//!   10 %: the median over the pairs of (attacked window / the quiet window
//!   just before it) is at least 0.9 (7 pairs; 14 when the first 7 fall
//!   short). Pairs, not the two medians: the host moves this machine's two
//!   vCPUs between near and far cores every few seconds
//!   (docs/perf/fast-path-2026-12-03-04.md,
//!   "Why some runs are slow"), which a pair 400 ms long mostly shares;
//! - `b` receives exactly what `a` sent it, in order and unaltered.
//!
//! The switch maps each guest memory region between two inaccessible guard
//! areas (`sys/guarded.rs`): an access outside a region would kill it. The
//! test checks that the guards are there (`/proc/PID/maps`) and that the
//! switch is the same process, live, and logged no panic at the end; then
//! `h` reconnects and its valid frames reach `z`, byte-exact.
//!
//! It needs root and the switch binary; run it under `flock
//! /tmp/vhu-e2e.lock` (it measures rates).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{RxLayout, TestDriver};
use vhu_api::QueueStats;
use vhu_tests::driver::send_all;
use vhu_tests::process::RunDir;
use vhu_tests::stream::Stream;
use vhu_tests::switch::SwitchProc;
use vhu_tests::wire::numbered_frame;
use vm_memory::{Bytes, GuestAddress};

const MAC_A: &str = "02:00:00:ee:00:0a";
const MAC_B: &str = "02:00:00:ee:00:0b";
const MAC_H: &str = "02:00:00:ee:00:48";
const MAC_Z: &str = "02:00:00:ee:00:5a";

use vhost_net_backend::test_utils::flags::{
    DESC_F_INDIRECT as INDIRECT, DESC_F_NEXT as NEXT, DESC_F_WRITE as WRITE,
};

/// Frames `a` sends to `b` per step of the stream.
const BURST: usize = 16;
/// Frames `a` sends to `h` per step (into `h`'s RX ring, when it has
/// buffers; else they are `no_buffers` drops of `h`).
const TO_H: usize = 2;
/// Malformed chains (or RX buffers) `h` publishes per tick.
const COPIES: usize = 32;
/// The attack's tick.
const TICK: Duration = Duration::from_millis(1);
/// One measurement window, and how many of each kind (alternating) per
/// scenario.
const WINDOW: Duration = Duration::from_millis(200);
const ROUNDS: usize = 7;
/// Sets of `ROUNDS` measured before a scenario's rate counts as fallen:
/// another set is pooled with the earlier ones while they fall short (a
/// burst of other load on the shared machine moves a 200 ms window). The
/// attacks cost the stream about 3 % (the attacker shares the test
/// process's CPU with it; medians 0.93-1.0 over five runs of every
/// scenario), and one CI run's pooled 14 pairs of one scenario came out at
/// 0.898: a third set keeps such a run from failing on one noisy stretch,
/// while a switch that really slows other ports stays below the floor in
/// every set.
const ATTEMPTS: usize = 3;
/// Drop reasons of the switch's own checks, taken on frames the ring
/// engine handed over (and counted in `tx_packets`).
const SWITCH_REASONS: [&str; 2] = ["too_long", "malformed"];
/// The lowest median allowed of the window pairs' attacked / quiet rates.
const FLOOR: f64 = 0.9;

const CONFIG: &str = r#"
[switch]
poll = "adaptive"
pmds = 1

[[port]]
name = "a"
kind = "vhost-user"
vlan = 10

[[port]]
name = "b"
kind = "vhost-user"
vlan = 10

[[port]]
name = "h"
kind = "vhost-user"
vlan = 10
mtu = 1500

[[port]]
name = "z"
kind = "vhost-user"
vlan = 10
"#;

/// The stream's frame `seq` from `a` to `b` (64 to 575 bytes).
fn ab_frame(seq: u64) -> Vec<u8> {
    numbered_frame(MAC_B, MAC_A, seq, 64 + (seq % 512) as usize)
}

// ===== the stream a -> b (and h) =====

/// The stream `a` -> `b`, with `TO_H` frames for `h` in each burst;
/// returns it and the count of frames for `h` queued.
fn start_stream(sw: &SwitchProc) -> (Stream, Arc<AtomicU64>) {
    let sent_ah = Arc::new(AtomicU64::new(0));
    let n = Arc::clone(&sent_ah);
    let stream = Stream::start(
        sw.driver("a"),
        sw.driver("b"),
        BURST,
        ab_frame,
        move |burst| {
            let seq = n.load(Ordering::Relaxed);
            burst.extend((0..TO_H as u64).map(|i| numbered_frame(MAC_H, MAC_A, seq + i, 60)));
            n.store(seq + TO_H as u64, Ordering::Relaxed);
        },
        || {},
    );
    (stream, sent_ah)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median over the window pairs of attacked / quiet.
fn paired(quiet: &[f64], attacked: &[f64]) -> f64 {
    median(quiet.iter().zip(attacked).map(|(q, a)| a / q).collect())
}

// ===== the attacks =====

/// Where a descriptor's `next` points.
#[derive(Clone, Copy)]
enum Next {
    /// Another descriptor of the same chain copy (its slot).
    Slot(usize),
    /// A raw index (outside the ring, say).
    Raw(u16),
}

/// One descriptor of a chain: `(addr, len, flags, next)`.
type D = (u64, u32, u16, Next);

enum Attack {
    /// Malformed TX chains, each with the drop reason it must be counted
    /// as; each tick publishes `COPIES` copies of one of them (over
    /// descriptors of their own), in turn.
    Tx(Vec<(Vec<D>, &'static str)>),
    /// TX heads outside the ring (`bad_descriptor`, never returned); each
    /// tick publishes `COPIES` of them, then a writable descriptor in a TX
    /// chain whose return shows the switch has read them.
    Heads(Vec<u16>),
    /// Malformed RX buffers `(addr, len, flags)` and their reason; the
    /// frames `a` sends to `h` land in them.
    Rx(Vec<(u64, u32, u16, &'static str)>),
    /// As `Tx`, after `h` truncated its memory file to half under the
    /// switch's mapping (`TestDriver::truncate_memory_file`): the chains
    /// point into what was cut off, where the switch reads zeros (a SIGBUS
    /// it recovers from, `vhu_guest_memory_faults_total`), so their frames
    /// have an all-zero source address (`malformed`).
    Truncated(Vec<(Vec<D>, &'static str)>),
}

struct Scenario {
    name: &'static str,
    attack: Attack,
}

/// What a scenario published (TX: chains by the reason they must be
/// counted as) and how many chains or buffers came back.
#[derive(Default)]
struct Published {
    by_reason: BTreeMap<&'static str, u64>,
    returned: u64,
}

/// The hostile guest on port `h`.
struct Hostile {
    drv: TestDriver,
    /// `COPIES` sets of TX descriptors, two each.
    tx_ids: Vec<[u16; 2]>,
    /// RX descriptors not posted.
    rx_free: Vec<u16>,
    /// A readable buffer: a header and a 60-byte frame to `z`.
    buf: (u64, u32),
}

impl Hostile {
    fn new(mut drv: TestDriver) -> Self {
        let tx_ids = (0..COPIES)
            .map(|_| {
                [
                    drv.reserve_desc(0, false).unwrap(),
                    drv.reserve_desc(0, false).unwrap(),
                ]
            })
            .collect();
        let rx_free = (0..COPIES)
            .map(|_| drv.reserve_desc(0, true).unwrap())
            .collect();
        let mut b = drv.zero_hdr();
        b.extend_from_slice(&numbered_frame(MAC_Z, MAC_H, 0xbad, 60));
        let buf = Self::write(&mut drv, &b);
        Self {
            drv,
            tx_ids,
            rx_free,
            buf,
        }
    }

    /// Copies `bytes` into fresh guest memory; `(gpa, len)`.
    fn write(drv: &mut TestDriver, bytes: &[u8]) -> (u64, u32) {
        let gpa = drv.alloc_guest(bytes.len() as u64).expect("alloc");
        drv.memory()
            .write_slice(bytes, GuestAddress(gpa))
            .expect("write guest memory");
        (gpa, bytes.len() as u32)
    }

    /// An indirect table of `descs` (`(addr, len, flags, next)`) in guest
    /// memory; its address.
    fn table(&mut self, descs: &[(u64, u32, u16, u16)]) -> u64 {
        let mut b = Vec::with_capacity(16 * descs.len());
        for &(addr, len, flags, next) in descs {
            b.extend_from_slice(&vhost_net_backend::test_utils::desc_bytes(
                addr, len, flags, next,
            ));
        }
        Self::write(&mut self.drv, &b).0
    }

    /// The scenarios, in order (the broken ring is not among them: it
    /// ends the run).
    fn scenarios(&mut self) -> Vec<Scenario> {
        let o = self.drv.opts().clone();
        let (gpa, len) = self.buf;
        let end = o.gpa_base + o.mem_size;
        let size = o.queue_size;
        let hdr = self.drv.hdr_len();
        let header_only = Self::write(&mut self.drv, &vec![0; hdr]);
        let mut big = self.drv.zero_hdr();
        big.extend_from_slice(&numbered_frame(MAC_Z, MAC_H, 1, 2000));
        let big = Self::write(&mut self.drv, &big);
        let inner = self.table(&[(gpa, len, 0, 0)]);
        let nested = self.table(&[(inner, 16, INDIRECT, 0)]);
        let nested_late = self.table(&[(gpa, len, NEXT, 1), (inner, 16, INDIRECT, 0)]);
        let looped = self.table(&[(gpa, len, NEXT, 1), (gpa, len, NEXT, 0)]);
        // 300 five-byte buffers: more than a frame may take.
        let many: Vec<(u64, u32, u16, u16)> = (0..300u16)
            .map(|i| {
                let next = if i < 299 { NEXT } else { 0 };
                (big.0 + 5 * u64::from(i), 5, next, i + 1)
            })
            .collect();
        let many = self.table(&many);
        let rx_buf = self.drv.alloc_guest(2048).unwrap();
        // Two pages in the half `Truncated` cuts off.
        let lost = end - 4 * 4096;
        assert!(
            [gpa, header_only.0, big.0, inner, many, rx_buf]
                .iter()
                .all(|&a| a + 16 * 300 < o.gpa_base + o.mem_size / 2),
            "the hostile driver's memory lies in the half it keeps"
        );
        let one = |addr, len, flags| vec![(addr, len, flags, Next::Raw(0))];
        vec![
            Scenario {
                name: "addresses outside guest memory, 4 GiB lengths",
                attack: Attack::Tx(vec![
                    (one(0x1000, 72, 0), "bad_address"),
                    (one(end - 40, 72, 0), "bad_address"),
                    (one(u64::MAX - 20, 72, 0), "bad_address"),
                    (one(gpa, u32::MAX, 0), "bad_address"),
                    (
                        vec![(gpa, len, NEXT, Next::Slot(1)), (end, 64, 0, Next::Raw(0))],
                        "bad_address",
                    ),
                ]),
            },
            Scenario {
                name: "descriptor loops and next outside the ring",
                attack: Attack::Tx(vec![
                    (
                        vec![
                            (gpa, len, NEXT, Next::Slot(1)),
                            (gpa, len, NEXT, Next::Slot(0)),
                        ],
                        "bad_descriptor",
                    ),
                    (vec![(gpa, len, NEXT, Next::Slot(0))], "bad_descriptor"),
                    (
                        vec![(0, 0, NEXT, Next::Slot(1)), (0, 0, NEXT, Next::Slot(0))],
                        "bad_descriptor",
                    ),
                    (vec![(gpa, len, NEXT, Next::Raw(4096))], "bad_descriptor"),
                ]),
            },
            Scenario {
                name: "heads outside the ring",
                attack: Attack::Heads(vec![size, size + 7, u16::MAX]),
            },
            Scenario {
                name: "device-writable buffers in TX chains",
                attack: Attack::Tx(vec![
                    (one(gpa, len, WRITE), "bad_descriptor"),
                    (
                        vec![
                            (gpa, len, NEXT, Next::Slot(1)),
                            (gpa, 64, WRITE, Next::Raw(0)),
                        ],
                        "bad_descriptor",
                    ),
                ]),
            },
            Scenario {
                name: "malformed indirect tables",
                attack: Attack::Tx(vec![
                    (one(nested, 16, INDIRECT), "bad_descriptor"),
                    (one(nested_late, 32, INDIRECT), "bad_descriptor"),
                    (one(inner, 16, INDIRECT | NEXT), "bad_descriptor"),
                    (one(inner, 15, INDIRECT), "bad_descriptor"),
                    (one(inner, 24, INDIRECT), "bad_descriptor"),
                    (one(inner, 0, INDIRECT), "bad_descriptor"),
                    (one(looped, 32, INDIRECT), "bad_descriptor"),
                    (one(0x1000, 16, INDIRECT), "bad_address"),
                ]),
            },
            Scenario {
                name: "empty, truncated and oversized frames, too many segments",
                attack: Attack::Tx(vec![
                    (one(0, 0, 0), "too_short"),
                    (one(header_only.0, header_only.1, 0), "too_short"),
                    (one(header_only.0, 5, 0), "too_short"),
                    (one(big.0, big.1, 0), "too_long"),
                    (one(many, 16 * 300, INDIRECT), "too_many_segments"),
                ]),
            },
            Scenario {
                name: "frames in memory the frontend truncated away",
                attack: Attack::Truncated(vec![
                    (one(lost, 72, 0), "malformed"),
                    (one(lost + 8192, 72, 0), "malformed"),
                ]),
            },
            Scenario {
                name: "read-only and unmapped RX buffers",
                attack: Attack::Rx(vec![
                    (rx_buf, 2048, 0, "bad_descriptor"),
                    (0x1000, 2048, WRITE, "bad_address"),
                    (end - 100, 2048, WRITE, "bad_address"),
                ]),
            },
        ]
    }

    /// Waits for `n` raw used elements of the TX ring, each of length 0.
    fn reap_tx(&mut self, n: usize) {
        let t0 = Instant::now();
        let mut got = 0;
        while got < n {
            self.drv.tx_completions(0);
            for (id, len) in self.drv.take_raw_used(0, false) {
                assert_eq!(len, 0, "a malformed TX chain ({id}) used with a length");
                got += 1;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "only {got} of {n} malformed TX chains came back"
            );
            if got < n {
                thread::sleep(Duration::from_micros(500));
            }
        }
        assert_eq!(got, n, "more used elements than chains published");
    }

    /// One tick of `attack` (its `turn`-th): publish, kick, wait a tick,
    /// take back what the switch returned.
    fn tick(&mut self, attack: &Attack, turn: usize, p: &mut Published) {
        let tx = self.drv.vring_index(0, false).unwrap();
        match attack {
            Attack::Tx(chains) | Attack::Truncated(chains) => {
                let (chain, reason) = &chains[turn % chains.len()];
                for ids in self.tx_ids.clone() {
                    for (slot, &(addr, len, flags, next)) in chain.iter().enumerate() {
                        let next = match next {
                            Next::Slot(s) => ids[s],
                            Next::Raw(r) => r,
                        };
                        self.drv
                            .write_desc(0, false, ids[slot], addr, len, flags, next)
                            .unwrap();
                    }
                    self.drv.push_avail(0, false, ids[0]).unwrap();
                }
                self.drv.kick_raw(tx).unwrap();
                *p.by_reason.entry(reason).or_default() += COPIES as u64;
                thread::sleep(TICK);
                self.reap_tx(COPIES);
                p.returned += COPIES as u64;
            }
            Attack::Heads(heads) => {
                let head = heads[turn % heads.len()];
                for _ in 0..COPIES {
                    self.drv.push_avail(0, false, head).unwrap();
                }
                let marker = self.tx_ids[0][0];
                let (gpa, len) = self.buf;
                self.drv
                    .write_desc(0, false, marker, gpa, len, WRITE, 0)
                    .unwrap();
                self.drv.push_avail(0, false, marker).unwrap();
                self.drv.kick_raw(tx).unwrap();
                *p.by_reason.entry("bad_descriptor").or_default() += COPIES as u64 + 1;
                thread::sleep(TICK);
                self.reap_tx(1);
                p.returned += 1;
            }
            Attack::Rx(bufs) => {
                let (addr, len, flags, _) = bufs[turn % bufs.len()];
                for id in std::mem::take(&mut self.rx_free) {
                    self.drv
                        .write_desc(0, true, id, addr, len, flags, 0)
                        .unwrap();
                    self.drv.push_avail(0, true, id).unwrap();
                }
                self.drv.kick_rx(0);
                thread::sleep(TICK);
                self.reap_rx(p);
            }
        }
    }

    /// Takes back the RX buffers the switch returned (each of length 0:
    /// no frame was written into a malformed buffer).
    fn reap_rx(&mut self, p: &mut Published) {
        assert!(
            self.drv.recv_frames(0).is_empty(),
            "a frame delivered into a malformed RX buffer"
        );
        for (id, len) in self.drv.take_raw_used(0, true) {
            assert_eq!(len, 0, "a malformed RX buffer ({id}) used with a length");
            self.rx_free.push(id);
            p.returned += 1;
        }
    }

    /// After an RX attack: waits until every posted buffer is back (the
    /// frames `a` keeps sending to `h` take them).
    fn drain_rx(&mut self, p: &mut Published) {
        let t0 = Instant::now();
        while self.rx_free.len() < COPIES {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{} malformed RX buffers never came back",
                COPIES - self.rx_free.len()
            );
            thread::sleep(Duration::from_millis(1));
            self.reap_rx(p);
        }
    }
}

fn drops(q: &QueueStats, rx: bool) -> BTreeMap<String, u64> {
    if rx {
        q.rx_dropped.clone()
    } else {
        q.tx_dropped.clone()
    }
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// `vhu_guest_memory_faults_total` from `/metrics`.
fn guest_memory_faults(sw: &SwitchProc) -> u64 {
    let m = String::from_utf8(sw.call("GET", "/metrics", "", 200)).expect("UTF-8 metrics");
    m.lines()
        .find_map(|l| l.strip_prefix("vhu_guest_memory_faults_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no vhu_guest_memory_faults_total in\n{m}"))
}

/// Checks that every mapping of the switch that holds guest memory (the
/// test drivers' memfds, with any page the SIGBUS handler replaced by
/// anonymous memory inside them) has an inaccessible mapping right before
/// and right after it; returns how many it checked.
fn assert_guarded(pid: u32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("the switch's maps");
    // (start, end, perms, path)
    let lines: Vec<(usize, usize, &str, &str)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let path = f.nth(3).unwrap_or("");
            let (a, b) = range.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
                perms,
                path,
            ))
        })
        .collect();
    let guest = |l: &(usize, usize, &str, &str)| l.3.contains("vhu-test-guest");
    let replaced = |l: &(usize, usize, &str, &str)| l.3.is_empty() && l.2 == "rw-p";
    let guard = |l: Option<&(usize, usize, &str, &str)>| l.is_some_and(|l| l.2 == "---p");
    let mut checked = 0;
    let mut i = 0;
    while i < lines.len() {
        if !guest(&lines[i]) {
            i += 1;
            continue;
        }
        // The run of touching mappings of this region.
        let first = i;
        while i + 1 < lines.len()
            && lines[i + 1].0 == lines[i].1
            && (guest(&lines[i + 1]) || replaced(&lines[i + 1]))
        {
            i += 1;
        }
        let (a, b) = (lines[first].0, lines[i].1);
        let before = first.checked_sub(1).map(|j| &lines[j]);
        assert!(
            guard(before) && before.is_some_and(|l| l.1 == a),
            "guest memory at {a:#x} without a guard before it:\n{maps}"
        );
        let after = lines.get(i + 1);
        assert!(
            guard(after) && after.is_some_and(|l| l.0 == b),
            "guest memory at {a:#x}-{b:#x} without a guard after it:\n{maps}"
        );
        checked += 1;
        i += 1;
    }
    checked
}

#[test]
#[ignore = "needs root and the switch binary: run scripts/test.sh"]
fn hostile_guest_loses_its_own_frames_and_slows_no_one() {
    let run = RunDir::new("hostile");
    let mut sw = SwitchProc::start(&run, CONFIG, &[]);
    for (mac, port) in [(MAC_B, "b"), (MAC_H, "h"), (MAC_Z, "z")] {
        sw.add_static_mac(mac, port, 10);
    }
    let pid = sw.pid();
    let mut z = sw.driver("z");
    z.post_rx_buffers(0, 64, 2048, RxLayout::Single).unwrap();
    z.kick_rx(0);
    let mut h = Hostile::new(sw.driver("h"));
    let scenarios = h.scenarios();
    let (stream, sent_ah) = start_stream(&sw);
    // Until the stream runs at its pace.
    thread::sleep(Duration::from_millis(500));
    assert!(stream.recv() > 0, "the stream moved nothing\n{}", sw.log());

    let mut report = Vec::new();
    for sc in &scenarios {
        let faults_before = guest_memory_faults(&sw);
        if matches!(sc.attack, Attack::Truncated(_)) {
            let o = h.drv.opts().clone();
            h.drv
                .truncate_memory_file(o.mem_size / 2)
                .expect("truncate h's memory file");
        }
        let before = sw.stats("h").total;
        let mut p = Published::default();
        let (mut quiet, mut attacked) = (Vec::new(), Vec::new());
        let mut turn = 0;
        for _ in 0..ATTEMPTS {
            for _ in 0..ROUNDS {
                quiet.push(stream.rate_while(WINDOW, || thread::sleep(Duration::from_millis(5))));
                attacked.push(stream.rate_while(WINDOW, || {
                    h.tick(&sc.attack, turn, &mut p);
                    turn += 1;
                }));
            }
            if paired(&quiet, &attacked) >= FLOOR {
                break;
            }
        }
        let rx = matches!(sc.attack, Attack::Rx(_));
        if rx {
            h.drain_rx(&mut p);
        }
        // The counters, once the switch has counted what was published.
        let want: u64 = if rx {
            p.returned
        } else {
            p.by_reason.values().sum()
        };
        let t0 = Instant::now();
        let after = loop {
            let s = sw.stats("h").total;
            let d = delta(&drops(&s, rx), &drops(&before, rx));
            let counted: u64 = d
                .iter()
                .filter(|(k, _)| k.as_str() != "no_buffers")
                .map(|(_, v)| v)
                .sum();
            if counted >= want || t0.elapsed() > Duration::from_secs(5) {
                break s;
            }
            thread::sleep(Duration::from_millis(10));
        };
        let d = delta(&drops(&after, rx), &drops(&before, rx));
        let (q, t) = (median(quiet.clone()), median(attacked.clone()));
        let ratio = paired(&quiet, &attacked);
        println!(
            "{}: published {:?} ({} returned); counted {d:?}; a->b {q:.0} frames/s quiet, \
             {t:.0} attacked (pairs: {ratio:.3}x); windows {quiet:.0?} / {attacked:.0?}",
            sc.name, p.by_reason, p.returned,
        );
        if rx {
            // Every buffer back is one frame for h dropped for its
            // buffer's reason; what found no buffer is no_buffers.
            let bad: u64 = d
                .iter()
                .filter(|(k, _)| k.as_str() != "no_buffers")
                .map(|(_, v)| v)
                .sum();
            assert_eq!(bad, p.returned, "{}: RX drops {d:?}", sc.name);
            let Attack::Rx(bufs) = &sc.attack else {
                unreachable!()
            };
            for (k, _) in d.iter().filter(|(k, _)| k.as_str() != "no_buffers") {
                assert!(
                    bufs.iter().any(|b| b.3 == k),
                    "{}: an RX drop for {k}",
                    sc.name
                );
            }
        } else {
            let want: BTreeMap<String, u64> = p
                .by_reason
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect();
            assert_eq!(d, want, "{}: TX drops of h", sc.name);
        }
        // Frames the ring handed over whole count as sent by `h` before
        // the switch drops them (its own checks: the MTU, the addresses);
        // every other malformed chain never becomes a frame.
        let handed_over: u64 = SWITCH_REASONS
            .iter()
            .filter_map(|r| p.by_reason.get(r))
            .sum();
        assert_eq!(
            (after.tx_packets - before.tx_packets, after.rx_packets),
            (handed_over, 0),
            "{}: h's frames",
            sc.name
        );
        assert!(
            ratio >= FLOOR,
            "{}: a->b fell from {q:.0} to {t:.0} frames/s, {ratio:.3}x over the pairs \
             (windows {quiet:.0?} / {attacked:.0?})",
            sc.name
        );
        let faults = guest_memory_faults(&sw) - faults_before;
        if let Attack::Truncated(chains) = &sc.attack {
            // One page replaced per page the chains point into, once.
            assert_eq!(
                faults,
                chains.len() as u64,
                "{}: guest memory faults",
                sc.name
            );
            println!(
                "{}: {faults} pages of guest memory replaced by zeros",
                sc.name
            );
        } else {
            assert_eq!(faults, 0, "{}: guest memory faults", sc.name);
        }
        report.push((sc.name, ratio));
    }

    // ----- the avail index more than a ring ahead -----
    let before = sw.stats("h").total;
    let addrs = h.drv.vring_addrs(0, false).unwrap();
    let next = h.drv.avail_idx(0, false).unwrap();
    h.drv
        .memory()
        .store(
            next.wrapping_add(addrs.size + 1).to_le(),
            GuestAddress(addrs.avail + 2),
            Ordering::Release,
        )
        .unwrap();
    let tx = h.drv.vring_index(0, false).unwrap();
    let (mut quiet, mut broken) = (Vec::new(), Vec::new());
    for round in 0..ATTEMPTS * ROUNDS {
        quiet.push(stream.rate_while(WINDOW, || thread::sleep(Duration::from_millis(5))));
        broken.push(stream.rate_while(WINDOW, || {
            h.drv.kick_raw(tx).unwrap();
            thread::sleep(TICK);
        }));
        if round == 0 {
            let t0 = Instant::now();
            while sw.stats("h").total.tx_dropped.get("ring_broken") != Some(&1) {
                assert!(t0.elapsed() < Duration::from_secs(5), "no ring_broken drop");
                thread::sleep(Duration::from_millis(10));
            }
        }
        if round + 1 == ROUNDS && paired(&quiet, &broken) >= FLOOR {
            break;
        }
    }
    let after = sw.stats("h").total;
    assert_eq!(
        delta(&after.tx_dropped, &before.tx_dropped),
        [("ring_broken".to_string(), 1)].into(),
        "a broken ring is counted once, however often it is kicked"
    );
    let (q, t) = (median(quiet.clone()), median(broken.clone()));
    let ratio = paired(&quiet, &broken);
    println!(
        "avail index a ring ahead: ring_broken 1; a->b {q:.0} quiet, {t:.0} broken (pairs: \
         {ratio:.3}x); windows {quiet:.0?} / {broken:.0?}"
    );
    assert!(
        ratio >= FLOOR,
        "a broken ring slowed a->b: {q:.0} -> {t:.0}, {ratio:.3}x over the pairs"
    );
    report.push(("avail index a ring ahead", ratio));

    // ----- the switch is whole -----
    // Every guest's memory (a, b, h, z) between guards, h's with the two
    // pages replaced by zeros inside it.
    let guarded = assert_guarded(pid);
    assert_eq!(guarded, 4, "guest memory mappings of a, b, h and z");
    let counts = stream.finish();
    let (sent, recv, bad) = (
        counts.sent.load(Ordering::Relaxed),
        counts.recv.load(Ordering::Relaxed),
        counts.bad.load(Ordering::Relaxed),
    );
    println!("a -> b: sent {sent}, received {recv}, altered or out of order {bad}");
    assert_eq!((recv, bad), (sent, 0), "b's stream");
    let st = sw.settle(&["a", "b", "h", "z"]);
    let sent_ah = sent_ah.load(Ordering::Relaxed);
    assert_eq!(st[0].total.tx_packets, sent + sent_ah, "a's tx_packets");
    assert_eq!(st[1].total.rx_packets, sent, "b's rx_packets");
    for s in &st[..2] {
        assert!(
            s.total
                .rx_dropped
                .values()
                .chain(s.total.tx_dropped.values())
                .all(|&n| n == 0),
            "port {} dropped: {:?}",
            s.port,
            s.total
        );
    }
    let h_rx_dropped: u64 = st[2].total.rx_dropped.values().sum();
    assert_eq!(h_rx_dropped, sent_ah, "every frame for h counted as a drop");
    assert_eq!(
        st[3].total.rx_packets, 0,
        "z received a malformed chain's frame"
    );
    // The same process as at the start: it is our child, never restarted.
    sw.call("GET", "/live", "", 200);
    assert!(
        !sw.log().contains("panicked"),
        "the switch panicked:\n{}",
        sw.log()
    );
    assert!(h.drv.violations().is_empty(), "{:?}", h.drv.violations());

    // ----- h, reconnected, is a port like any other -----
    let Hostile { drv, .. } = h;
    drv.disconnect();
    sw.wait_log_count("port h: frontend disconnected", 1, Duration::from_secs(10));
    let mut h2 = sw.driver("h");
    let frames: Vec<Vec<u8>> = (0..50)
        .map(|i| numbered_frame(MAC_Z, MAC_H, i, 60 + i as usize))
        .collect();
    assert_eq!(send_all(&mut h2, &frames, Duration::from_secs(5)), 50);
    let got = z.recv_frames_until(0, 50, Duration::from_secs(5));
    assert_eq!(got.len(), 50, "z from the reconnected h");
    for (g, w) in got.iter().zip(&frames) {
        assert!(g.data == *w, "z received an altered frame");
    }
    println!("ratios attacked / quiet: {report:.3?}; {guarded} guarded guest mappings");
    let status = sw.stop();
    assert!(status.success(), "switch exit: {status:?}");
}

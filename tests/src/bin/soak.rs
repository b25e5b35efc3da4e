// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The soak: one `vhu-switch` (adaptive polling, two PMDs) under mixed
//! traffic, reconnects and control-API churn for a given time, with
//! accounting that can fail.
//!
//! * **Traffic**: four in-process virtio-net drivers (`f0`..`f3`,
//!   `vhost_net_backend::test_utils::TestDriver`) and a host in a network
//!   namespace behind an AF_PACKET uplink (`up`, on a veth pair; the host
//!   end is the library's AF_PACKET socket opened in the namespace) all in
//!   VLAN 10. Every frontend sends numbered frames to every other node
//!   (unicast, after a first round of broadcasts taught the switch their
//!   addresses) and one in sixteen to everyone (broadcast); the host sends
//!   numbered unicast frames to each frontend. Each (sender, receiver) pair
//!   and each sender's broadcasts are a stream of their own.
//! * **Reconnects**: every round, after a checkpoint, one frontend hangs
//!   up; the others keep sending to it for a while (frames the switch must
//!   count as dropped), then it connects again.
//! * **Control API**: a thread adds a vhost-user port (VLAN 99) and deletes
//!   it again every 300 ms (`POST`/`DELETE /ports`); another reads
//!   `GET /ports`, `/fdb`, `/metrics` and a port's stats in a loop.
//!
//! **Checkpoints** (after every traffic phase): all senders stop, what is
//! in flight is drained (no frame for 300 ms and the switch's counters
//! still for 200 ms), then for every receiver the frames it is missing
//! (sent to it minus received, over all its streams) must equal the drops
//! counted for it: its port's `rx_dropped` (every reason), and for the host
//! the uplink's plus the kernel's (the host socket's `PACKET_STATISTICS`,
//! the veth's drop counters). Frames the host sent that the uplink lost on
//! the way in (its `tx_dropped`) may be missing at any frontend, no more.
//! Each frontend's `tx_packets` equals what its driver sent, its
//! `rx_packets` what its driver received; no frontend's frame is dropped
//! on the way in. Every received frame is checked byte for byte against
//! the frame its number names, and within a stream numbers only grow (no
//! repeat, no reordering). The switch's process must be the same at the
//! end (and then stop cleanly on SIGTERM); its open fds and shared mappings
//! after the first two rounds (warm-up) and at the end equal exactly, its
//! RSS grows by at most `--rss-slack-mib`.
//!
//! ```text
//! soak [--duration 60s] [--rss-slack-mib 8] [--inject lose|corrupt|repeat]
//! ```
//!
//! `--inject` checks the checks: after the warm-up the soak's receiver
//! silently forgets one frame of `f0`'s (`lose`), alters a byte of one
//! before checking it (`corrupt`) or checks one twice (`repeat`); the
//! soak must then fail.
//!
//! Needs root (network namespaces, AF_PACKET) and the release switch
//! (`cargo build --release --workspace`); run by `scripts/soak.sh`, under
//! `flock /tmp/vhu-e2e.lock`. Exit status 0 only if every check held.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use vhost_net_backend::io::af_packet::{AfPacket, AfPacketConfig};
use vhost_net_backend::io::Uplink;
use vhost_net_backend::stats::DropReason;
use vhost_net_backend::test_utils::{DriverError, DriverOpts, RxLayout, TestDriver, TxLayout};
use vhost_net_backend::VirtioNetHdr;
use vhu_api::{FdbEntryView, PortStats, PortView};
use vhu_tests::footprint::Footprint;
use vhu_tests::netns::{mac_octets, VethPair};
use vhu_tests::process::RunDir;
use vhu_tests::switch::SwitchProc;

/// Driver frontends.
const N: usize = 4;
/// The host's node index.
const HOST: usize = N;
/// The destination byte of a broadcast.
const BCAST: u8 = 0xff;
/// The soak's EtherType (IEEE local experimental).
const ETH_SOAK: [u8; 2] = [0x88, 0xb5];
/// Frames each sender queues per turn.
const BURST: usize = 8;
/// RX buffers each frontend keeps posted.
const RX_BUFS: usize = 256;
/// Traffic between checkpoints with every frontend connected.
const PHASE: Duration = Duration::from_millis(1500);
/// Traffic while one frontend is away.
const AWAY: Duration = Duration::from_millis(300);
/// The churn port's period (added, then deleted half-way).
const CHURN_PERIOD: Duration = Duration::from_millis(300);
/// Pause between two API reads.
const READ_PAUSE: Duration = Duration::from_millis(20);

const CONFIG: &str = r#"
[switch]
poll = "adaptive"
pmds = 2

[[port]]
name = "f0"
kind = "vhost-user"
vlan = 10

[[port]]
name = "f1"
kind = "vhost-user"
vlan = 10

[[port]]
name = "f2"
kind = "vhost-user"
vlan = 10

[[port]]
name = "f3"
kind = "vhost-user"
vlan = 10
"#;

macro_rules! fail {
    ($($t:tt)*) => { panic!("soak FAILED: {}", format!($($t)*)) };
}

// ===== arguments =====

struct Args {
    duration: Duration,
    rss_slack_kb: u64,
    inject: Option<Inject>,
}

/// A fault the soak injects into its own receive path (`--inject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inject {
    /// One received frame is not recorded.
    Lose,
    /// One received frame has a byte flipped before it is checked.
    Corrupt,
    /// One received frame is checked twice.
    Repeat,
}

/// `60`, `60s`, `5m`, `1h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("bad duration unit in {s:?} (s, m, h)")),
    };
    if secs == 0 {
        return Err("the duration must be at least 1 s".into());
    }
    Ok(Duration::from_secs(secs))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        duration: Duration::from_secs(60),
        rss_slack_kb: 8 << 10,
        inject: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--duration" => a.duration = parse_duration(&val()?)?,
            "--inject" => {
                a.inject = Some(match val()?.as_str() {
                    "lose" => Inject::Lose,
                    "corrupt" => Inject::Corrupt,
                    "repeat" => Inject::Repeat,
                    o => return Err(format!("--inject {o:?}: lose, corrupt or repeat")),
                })
            }
            "--rss-slack-mib" => {
                let v = val()?;
                let mib: u64 = v.parse().map_err(|_| format!("bad --rss-slack-mib {v}"))?;
                a.rss_slack_kb = mib << 10;
            }
            "-h" | "--help" => return Err(
                "usage: soak [--duration 60s] [--rss-slack-mib 8] [--inject lose|corrupt|repeat]"
                    .into(),
            ),
            o => return Err(format!("unknown argument {o:?}")),
        }
    }
    Ok(a)
}

// ===== frames =====

fn frontend_mac(i: usize) -> [u8; 6] {
    [0x02, 0x00, 0x00, 0x50, 0x00, i as u8]
}

/// Frame `seq` of the stream from `src` to `dst` (`BCAST`): addresses, the
/// soak's EtherType, source and destination index, the number, then a
/// pattern; 64 to 1023 bytes.
fn frame(macs: &[[u8; 6]], src: usize, dst: u8, seq: u64) -> Vec<u8> {
    let len = 64 + ((seq.wrapping_mul(37) + src as u64 * 101) % 960) as usize;
    let mut f = Vec::with_capacity(len);
    if dst == BCAST {
        f.extend_from_slice(&[0xff; 6]);
    } else {
        f.extend_from_slice(&macs[usize::from(dst)]);
    }
    f.extend_from_slice(&macs[src]);
    f.extend_from_slice(&ETH_SOAK);
    f.push(src as u8);
    f.push(dst);
    f.extend_from_slice(&seq.to_le_bytes());
    let salt = (seq as u8) ^ (src as u8).wrapping_mul(61) ^ dst;
    f.extend((f.len()..len).map(|i| (i as u8).wrapping_mul(13) ^ salt));
    f
}

// ===== accounting =====

/// What the soak knows of its streams.
struct Ledger {
    macs: Vec<[u8; 6]>,
    /// `uni_sent[s][d]`: unicast frames `s` sent to `d`.
    uni_sent: [[u64; N + 1]; N + 1],
    /// Broadcast frames frontend `s` sent.
    bc_sent: [u64; N + 1],
    /// `uni_next[d][s]`: the next number `d` may see from `s` (unicast).
    uni_next: [[u64; N + 1]; N + 1],
    bc_next: [[u64; N + 1]; N + 1],
    /// `uni_got[d][s]`, `bc_got[d][s]`: frames `d` received of each stream.
    uni_got: [[u64; N + 1]; N + 1],
    bc_got: [[u64; N + 1]; N + 1],
    /// Frames each node received (checked).
    got: [u64; N + 1],
    /// Frames with another EtherType the host received (not the soak's).
    foreign_host: u64,
}

impl Ledger {
    fn new(macs: Vec<[u8; 6]>) -> Self {
        Self {
            macs,
            uni_sent: [[0; N + 1]; N + 1],
            bc_sent: [0; N + 1],
            uni_next: [[0; N + 1]; N + 1],
            bc_next: [[0; N + 1]; N + 1],
            uni_got: [[0; N + 1]; N + 1],
            bc_got: [[0; N + 1]; N + 1],
            got: [0; N + 1],
            foreign_host: 0,
        }
    }

    fn sent_total(&self) -> u64 {
        self.uni_sent.iter().flatten().sum::<u64>() + self.bc_sent.iter().sum::<u64>()
    }

    fn sent_by(&self, s: usize) -> u64 {
        self.uni_sent[s].iter().sum::<u64>() + self.bc_sent[s]
    }

    /// Checks frame `f` received by node `r`.
    fn receive(&mut self, r: usize, f: &[u8]) {
        if f.len() < 24 || f[12..14] != ETH_SOAK {
            if r == HOST {
                self.foreign_host += 1;
                return;
            }
            fail!(
                "{} received a foreign frame: {:02x?}",
                name(r),
                &f[..f.len().min(32)]
            );
        }
        let (src, dst) = (usize::from(f[14]), f[15]);
        let seq = u64::from_le_bytes(f[16..24].try_into().expect("8 bytes"));
        if src > N || src == r || (dst != BCAST && usize::from(dst) != r) {
            fail!(
                "{} received a frame from node {src} to {dst} (misdelivered), seq {seq}",
                name(r)
            );
        }
        if f != frame(&self.macs, src, dst, seq).as_slice() {
            fail!(
                "{} received frame {seq} of {} -> {dst} altered ({} bytes)",
                name(r),
                name(src),
                f.len()
            );
        }
        let next = if dst == BCAST {
            &mut self.bc_next[r][src]
        } else {
            &mut self.uni_next[r][src]
        };
        if seq < *next {
            fail!(
                "{} received frame {seq} of the stream {} -> {dst} after {} (repeat or reordering)",
                name(r),
                name(src),
                *next - 1
            );
        }
        *next = seq + 1;
        if dst == BCAST {
            self.bc_got[r][src] += 1;
        } else {
            self.uni_got[r][src] += 1;
        }
        self.got[r] += 1;
    }

    /// Frames node `r` has not received of all that were sent to it.
    fn missing(&self, r: usize) -> u64 {
        let sent: u64 = (0..=N)
            .filter(|&s| s != r)
            .map(|s| self.uni_sent[s][r] + self.bc_sent[s])
            .sum();
        sent - self.got[r]
    }
}

fn name(i: usize) -> String {
    if i == HOST {
        "host".into()
    } else {
        format!("f{i}")
    }
}

// ===== the nodes =====

fn connect(sw: &SwitchProc, i: usize) -> TestDriver {
    let sock = sw.sockets.join(format!("f{i}.sock"));
    let mut d = TestDriver::connect(&sock, DriverOpts::default())
        .unwrap_or_else(|e| fail!("connect to port f{i}: {e}"));
    let n = d
        .post_rx_buffers(0, RX_BUFS, 2048, RxLayout::Single)
        .unwrap_or_else(|e| fail!("f{i}: post RX buffers: {e}"));
    assert_eq!(n, RX_BUFS, "f{i}: RX buffers posted");
    d.kick_rx(0);
    d
}

/// Who sends in a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// One broadcast from each frontend (learning).
    Broadcast,
    /// The host only.
    HostOnly,
    /// Everyone.
    All,
}

struct Nodes {
    drivers: Vec<Option<TestDriver>>,
    hdr: Vec<u8>,
    host: AfPacket,
    ledger: Ledger,
    /// Rotates the destinations.
    turn: u64,
    /// A fault to inject into the next frame `f0` receives.
    inject: Option<Inject>,
}

impl Nodes {
    /// One turn of sending: `BURST` frames from each connected frontend
    /// and from the host (fewer when a ring is full). Returns how many.
    fn send_turn(&mut self, what: Turn) -> usize {
        let broadcast_only = what == Turn::Broadcast;
        let mut n = 0;
        self.turn += 1;
        for s in 0..N {
            if what == Turn::HostOnly {
                break;
            }
            let Some(d) = self.drivers[s].as_mut() else {
                continue;
            };
            for k in 0..BURST {
                let pick = self.turn as usize * BURST + k;
                let dst = if broadcast_only || pick.is_multiple_of(16) {
                    BCAST
                } else {
                    // Everyone else, the host included, in turn.
                    ((s + 1 + pick % N) % (N + 1)) as u8
                };
                let seq = if dst == BCAST {
                    self.ledger.bc_sent[s]
                } else {
                    self.ledger.uni_sent[s][usize::from(dst)]
                };
                let f = frame(&self.ledger.macs, s, dst, seq);
                match d.send_frame(0, &self.hdr, &f, TxLayout::Single) {
                    Ok(_) => {}
                    Err(DriverError::RingFull { .. } | DriverError::OutOfMemory(_)) => break,
                    Err(e) => fail!("f{s}: send: {e}"),
                }
                if dst == BCAST {
                    self.ledger.bc_sent[s] += 1;
                } else {
                    self.ledger.uni_sent[s][usize::from(dst)] += 1;
                }
                n += 1;
                if broadcast_only {
                    break;
                }
            }
            d.kick_tx(0);
            d.tx_completions(0);
        }
        if what != Turn::Broadcast {
            for k in 0..BURST {
                let dst = (self.turn as usize * BURST + k) % N;
                let seq = self.ledger.uni_sent[HOST][dst];
                let f = frame(&self.ledger.macs, HOST, dst as u8, seq);
                match self.host.tx_push(&VirtioNetHdr::default(), &f) {
                    Ok(()) => {}
                    Err(DropReason::NoBuffers) => break,
                    Err(r) => fail!("the host's socket refused frame {seq} to f{dst}: {r:?}"),
                }
                self.ledger.uni_sent[HOST][dst] += 1;
                n += 1;
            }
            if let Err(e) = self.host.tx_flush() {
                fail!("the host's socket: send: {e}");
            }
        }
        n
    }

    /// Takes what every node received, checks it, reposts the buffers.
    /// Returns how many frames.
    fn receive(&mut self) -> usize {
        let mut n = 0;
        for r in 0..N {
            let Some(d) = self.drivers[r].as_mut() else {
                continue;
            };
            let got = d.recv_frames(0);
            if got.is_empty() {
                continue;
            }
            for g in &got {
                match self.inject.take_if(|_| r == 0) {
                    None => self.ledger.receive(r, &g.data),
                    Some(Inject::Lose) => {}
                    Some(Inject::Corrupt) => {
                        let mut f = g.data.clone();
                        let last = f.len() - 1;
                        f[last] ^= 0x20;
                        self.ledger.receive(r, &f);
                    }
                    Some(Inject::Repeat) => {
                        self.ledger.receive(r, &g.data);
                        self.ledger.receive(r, &g.data);
                    }
                }
            }
            n += got.len();
            d.post_rx_buffers(0, got.len(), 2048, RxLayout::Single)
                .unwrap_or_else(|e| fail!("f{r}: repost RX buffers: {e}"));
            d.kick_rx(0);
            if !d.violations().is_empty() {
                fail!("f{r}: ring violations: {:?}", d.violations());
            }
        }
        let ledger = &mut self.ledger;
        loop {
            let got = self
                .host
                .rx_burst(256, &mut |_, f| ledger.receive(HOST, f))
                .unwrap_or_else(|e| fail!("the host's socket: receive: {e}"));
            n += got;
            if got == 0 {
                break;
            }
        }
        n
    }

    /// Traffic for `t`.
    fn traffic(&mut self, t: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < t {
            self.send_turn(Turn::All);
            self.receive();
            // Pacing: two shared cores, nothing here spins.
            thread::sleep(Duration::from_micros(500));
        }
    }
}

// ===== the switch's side =====

/// API requests the soak made, by kind.
#[derive(Default)]
struct ApiCounts {
    reads: AtomicU64,
    writes: AtomicU64,
    ports_added: AtomicU64,
    ports_removed: AtomicU64,
}

/// The first error of a background thread.
static BG_ERROR: Mutex<Option<String>> = Mutex::new(None);

fn bg_fail(msg: String) {
    let mut e = BG_ERROR.lock().unwrap_or_else(|p| p.into_inner());
    if e.is_none() {
        *e = Some(msg);
    }
}

fn request(
    sw: &SwitchProc,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Vec<u8>, String> {
    let want = match method {
        "POST" => 201,
        "DELETE" => 204,
        _ => 200,
    };
    match sw.try_call(method, path, body.map(str::as_bytes)) {
        Ok((s, b)) if s == want => Ok(b),
        Ok((s, b)) => Err(format!(
            "{method} {path}: {s} {}",
            String::from_utf8_lossy(&b)
        )),
        Err(e) => Err(format!("{method} {path}: {e}")),
    }
}

/// What the control-API threads do while `pause` is clear: churn adds and
/// deletes a port, the reader reads. Each sets its `idle` flag once paused
/// (the churn port deleted).
struct Background {
    stop: AtomicBool,
    pause: AtomicBool,
    churn_idle: AtomicBool,
    reader_idle: AtomicBool,
    api: ApiCounts,
}

impl Background {
    fn churn(&self, sw: &SwitchProc) {
        let mut k = 0u64;
        while !self.stop.load(Ordering::Relaxed) {
            if self.pause.load(Ordering::Relaxed) {
                self.churn_idle.store(true, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            self.churn_idle.store(false, Ordering::Relaxed);
            let name = format!("churn{k}");
            let body = format!(r#"{{"name":"{name}","kind":"vhost-user","vlan":99}}"#);
            let step = request(sw, "POST", "/ports", Some(&body)).and_then(|_| {
                self.api.writes.fetch_add(1, Ordering::Relaxed);
                self.api.ports_added.fetch_add(1, Ordering::Relaxed);
                thread::sleep(CHURN_PERIOD / 2);
                request(sw, "DELETE", &format!("/ports/{name}"), None)
            });
            match step {
                Ok(_) => {
                    self.api.writes.fetch_add(1, Ordering::Relaxed);
                    self.api.ports_removed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    bg_fail(format!("port churn: {e}"));
                    return;
                }
            }
            k += 1;
            thread::sleep(CHURN_PERIOD / 2);
        }
    }

    fn reader(&self, sw: &SwitchProc) {
        let mut k = 0usize;
        while !self.stop.load(Ordering::Relaxed) {
            if self.pause.load(Ordering::Relaxed) {
                self.reader_idle.store(true, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            self.reader_idle.store(false, Ordering::Relaxed);
            let r = match k % 4 {
                0 => request(sw, "GET", "/ports", None).and_then(|b| {
                    let v: Vec<PortView> =
                        serde_json::from_slice(&b).map_err(|e| format!("GET /ports: {e}"))?;
                    let names: Vec<String> = v.into_iter().map(|p| p.spec.name).collect();
                    match ["f0", "f1", "f2", "f3", "up"]
                        .iter()
                        .find(|p| !names.iter().any(|n| n == *p))
                    {
                        Some(p) => Err(format!("GET /ports: no {p} in {names:?}")),
                        None => Ok(()),
                    }
                }),
                1 => request(sw, "GET", "/fdb", None).and_then(|b| {
                    serde_json::from_slice::<Vec<FdbEntryView>>(&b)
                        .map(drop)
                        .map_err(|e| format!("GET /fdb: {e}"))
                }),
                2 => request(sw, "GET", "/metrics", None).and_then(|b| {
                    if String::from_utf8_lossy(&b).contains("vhu_port_rx_packets_total") {
                        Ok(())
                    } else {
                        Err("GET /metrics: no vhu_port_rx_packets_total".into())
                    }
                }),
                _ => {
                    let p = format!("/ports/f{}/stats", (k / 4) % N);
                    request(sw, "GET", &p, None).and_then(|b| {
                        serde_json::from_slice::<PortStats>(&b)
                            .map(drop)
                            .map_err(|e| format!("GET {p}: {e}"))
                    })
                }
            };
            if let Err(e) = r {
                bg_fail(format!("API reader: {e}"));
                return;
            }
            self.api.reads.fetch_add(1, Ordering::Relaxed);
            k += 1;
            thread::sleep(READ_PAUSE);
        }
    }

    /// Pauses both threads and waits until they are idle (at once when
    /// they have stopped).
    fn quiesce(&self) {
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        self.pause.store(true, Ordering::Relaxed);
        self.churn_idle.store(false, Ordering::Relaxed);
        self.reader_idle.store(false, Ordering::Relaxed);
        let t0 = Instant::now();
        while !(self.churn_idle.load(Ordering::Relaxed) && self.reader_idle.load(Ordering::Relaxed))
        {
            if BG_ERROR.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the control-API threads do not pause"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn resume(&self) {
        self.pause.store(false, Ordering::Relaxed);
    }
}

/// What the switch and the kernel counted at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counted {
    ports: Vec<PortStats>,
    /// The host's socket.
    host_rx: u64,
    host_rx_dropped: u64,
    host_tx: u64,
    host_tx_dropped: u64,
    /// The veth's drops: host end rx, tx; peer end rx, tx.
    veth_dropped: [u64; 4],
}

const PORTS: [&str; N + 1] = ["f0", "f1", "f2", "f3", "up"];

fn read_counted(sw: &SwitchProc, nodes: &Nodes, veth: &VethPair, api: &ApiCounts) -> Counted {
    let ports = PORTS
        .iter()
        .map(|p| {
            let b = request(sw, "GET", &format!("/ports/{p}/stats"), None)
                .unwrap_or_else(|e| fail!("{e}"));
            api.reads.fetch_add(1, Ordering::Relaxed);
            serde_json::from_slice(&b).unwrap_or_else(|e| fail!("GET /ports/{p}/stats: {e}"))
        })
        .collect();
    let c = nodes.host.counters();
    let (h, p) = (veth.host_stats(), veth.peer_stats());
    Counted {
        ports,
        host_rx: c.rx_packets,
        host_rx_dropped: c.rx_dropped(),
        host_tx: c.tx_packets,
        host_tx_dropped: c.tx_dropped(),
        veth_dropped: [h.rx_dropped, h.tx_dropped, p.rx_dropped, p.tx_dropped],
    }
}

/// Stops sending and drains: receives until nothing arrived for 300 ms and
/// the counters stood still for 200 ms more.
fn drain(sw: &SwitchProc, nodes: &mut Nodes, veth: &VethPair, api: &ApiCounts) -> Counted {
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "soak FAILED: frames still arrive 30 s after the senders stopped"
        );
        let mut last = Instant::now();
        while last.elapsed() < Duration::from_millis(300) {
            for d in nodes.drivers.iter_mut().flatten() {
                d.kick_tx(0);
                d.tx_completions(0);
            }
            if nodes.receive() > 0 {
                last = Instant::now();
            }
            thread::sleep(Duration::from_millis(2));
        }
        let a = read_counted(sw, nodes, veth, api);
        let t1 = Instant::now();
        let mut moved = 0;
        while t1.elapsed() < Duration::from_millis(200) {
            moved += nodes.receive();
            thread::sleep(Duration::from_millis(2));
        }
        let b = read_counted(sw, nodes, veth, api);
        if moved == 0 && a == b {
            return b;
        }
    }
}

/// The drops counted on each frontend's port.
fn frontend_drops(c: &Counted) -> [u64; N] {
    std::array::from_fn(|i| drops(&c.ports[i]).0)
}

fn drops(s: &PortStats) -> (u64, u64) {
    (s.total.rx_dropped_total(), s.total.tx_dropped_total())
}

/// The checkpoint's checks (see the crate doc).
fn check(l: &Ledger, c: &Counted, when: &str) {
    let up = &c.ports[N];
    // The host: what it misses is what the uplink and the kernel dropped.
    let host_counted = drops(up).0 + c.host_rx_dropped + c.veth_dropped[1] + c.veth_dropped[2];
    if l.missing(HOST) != host_counted {
        fail!(
            "{when}: the host misses {} frames, {host_counted} counted (uplink rx_dropped {:?}, \
             host socket {}, veth tx {} / rx {}); sent to it {}, received {}",
            l.missing(HOST),
            up.total.rx_dropped,
            c.host_rx_dropped,
            c.veth_dropped[1],
            c.veth_dropped[2],
            l.missing(HOST) + l.got[HOST],
            l.got[HOST]
        );
    }
    let on_the_way = c.host_rx_dropped + c.veth_dropped[1] + c.veth_dropped[2];
    if up.total.rx_packets != l.got[HOST] + on_the_way {
        fail!(
            "{when}: the uplink delivered {} frames, the host received {} \
             ({on_the_way} dropped by its socket and the veth; {} foreign frames besides)",
            up.total.rx_packets,
            l.got[HOST],
            l.foreign_host,
        );
    }
    // The host's frames on their way in.
    if c.host_tx + c.host_tx_dropped != l.sent_by(HOST) {
        fail!(
            "{when}: the host's socket sent {} (+{} dropped), its sender queued {}",
            c.host_tx,
            c.host_tx_dropped,
            l.sent_by(HOST)
        );
    }
    let ingress = drops(up).1 + c.host_tx_dropped + c.veth_dropped[0] + c.veth_dropped[3];
    if up.total.tx_packets + ingress != l.sent_by(HOST) {
        fail!(
            "{when}: the uplink took {} frames from the host and {ingress} were counted lost, \
             of {} sent",
            up.total.tx_packets,
            l.sent_by(HOST)
        );
    }
    let mut missing_fe = 0;
    let mut counted_fe = 0;
    for r in 0..N {
        let s = &c.ports[r];
        let (rx_d, tx_d) = drops(s);
        if s.total.tx_packets != l.sent_by(r) || tx_d != 0 {
            fail!(
                "{when}: f{r} sent {}, its port counted {} sent and {:?} dropped",
                l.sent_by(r),
                s.total.tx_packets,
                s.total.tx_dropped
            );
        }
        if s.total.rx_packets != l.got[r] {
            fail!(
                "{when}: f{r}'s port delivered {} frames, its driver received {}",
                s.total.rx_packets,
                l.got[r]
            );
        }
        let m = l.missing(r);
        if m < rx_d || m > rx_d + ingress {
            fail!(
                "{when}: f{r} misses {m} frames, its port counted {rx_d} dropped ({:?}), \
                 {ingress} of the host's lost on the way in",
                s.total.rx_dropped
            );
        }
        missing_fe += m;
        counted_fe += rx_d;
    }
    if missing_fe != counted_fe + ingress {
        fail!(
            "{when}: the frontends miss {missing_fe} frames, {counted_fe} counted at their ports \
             and {ingress} on the host's way in"
        );
    }
}

fn alive(sw: &SwitchProc, pid: u32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next());
    if !matches!(state, Some(Some(s)) if s != 'Z') {
        fail!("the switch (pid {pid}) is gone:\n{}", sw.log());
    }
    if let Some(e) = BG_ERROR.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        fail!("{e}");
    }
}

/// Footprint once the control-API threads are paused and the fds still.
fn footprint(sw: &SwitchProc, bg: &Background) -> Footprint {
    bg.quiesce();
    let f = sw.stable_footprint(Duration::from_millis(500));
    bg.resume();
    f
}

fn soak(a: &Args) {
    let t_setup = Instant::now();
    let veth = VethPair::new();
    veth.set_host_ipv6(false).expect("IPv6 off on the host end");
    veth.set_peer_ipv6(false).expect("IPv6 off on the peer end");
    let run = RunDir::new("soak");
    let mut sw = SwitchProc::start(&run, CONFIG, &[]);
    let pid = sw.pid();
    let up_body = format!(
        r#"{{"name":"up","kind":"af_packet","interface":"{}","vlan":10}}"#,
        veth.host()
    );
    sw.call("POST", "/ports", &up_body, 201);
    let peer = veth.peer().to_owned();
    let host = veth
        .ns()
        .in_ns(|| {
            let cfg = AfPacketConfig {
                vnet_hdr: false,
                ..AfPacketConfig::default()
            };
            AfPacket::open(&peer, cfg)
        })
        .unwrap_or_else(|e| fail!("the host's AF_PACKET socket on {peer}: {e}"));
    let mut macs: Vec<[u8; 6]> = (0..N).map(frontend_mac).collect();
    macs.push(mac_octets(&veth.peer_mac()));
    let drivers: Vec<Option<TestDriver>> = (0..N).map(|i| Some(connect(&sw, i))).collect();
    let hdr = drivers[0].as_ref().expect("f0").zero_hdr();
    let mut nodes = Nodes {
        drivers,
        hdr,
        host,
        ledger: Ledger::new(macs),
        turn: 0,
        inject: None,
    };
    let bg = Background {
        stop: AtomicBool::new(false),
        pause: AtomicBool::new(false),
        churn_idle: AtomicBool::new(false),
        reader_idle: AtomicBool::new(false),
        api: ApiCounts::default(),
    };
    let mut disconnects = [0usize; N];
    let mut reconnects = 0;
    let mut checkpoints = 0;
    // Frontend port drops on ports whose frontend was connected, and on the
    // port of the frontend away.
    let (mut drops_all, mut drops_away) = (0u64, 0u64);

    // Learning: every frontend broadcasts, then the host sends each one a
    // frame; nothing is unicast to an unknown address after this.
    nodes.send_turn(Turn::Broadcast);
    let c = drain(&sw, &mut nodes, &veth, &bg.api);
    check(&nodes.ledger, &c, "learning (broadcasts)");
    nodes.send_turn(Turn::HostOnly);
    let c = drain(&sw, &mut nodes, &veth, &bg.api);
    check(&nodes.ledger, &c, "learning (the host)");
    let mut seen = frontend_drops(&c);
    println!(
        "soak: setup {:.1} s; switch pid {pid}; host {} behind uplink up on {}",
        t_setup.elapsed().as_secs_f64(),
        veth.peer_mac(),
        veth.host()
    );

    let mut fp_start = None;
    let t0 = Instant::now();
    let mut round = 0usize;
    thread::scope(|s| {
        s.spawn(|| bg.churn(&sw));
        s.spawn(|| bg.reader(&sw));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
            // All connected.
            nodes.traffic(PHASE);
            let c = drain(&sw, &mut nodes, &veth, &bg.api);
            checkpoints += 1;
            check(&nodes.ledger, &c, &format!("round {round}"));
            let now = frontend_drops(&c);
            drops_all += (0..N).map(|i| now[i] - seen[i]).sum::<u64>();
            seen = now;
            alive(&sw, pid);
            if round == 1 {
                // Warm-up done: one reconnect, churn and reads behind us.
                fp_start = Some(footprint(&sw, &bg));
                nodes.inject = a.inject;
            }
            if t0.elapsed() >= a.duration && round >= 2 {
                break;
            }
            // One frontend away, the others still sending to it.
            let x = round % N;
            nodes.drivers[x].take().expect("connected").disconnect();
            disconnects[x] += 1;
            sw.wait_log_count(
                &format!("port f{x}: frontend disconnected"),
                disconnects[x],
                Duration::from_secs(10),
            );
            nodes.traffic(AWAY);
            let c = drain(&sw, &mut nodes, &veth, &bg.api);
            checkpoints += 1;
            check(&nodes.ledger, &c, &format!("round {round}, f{x} away"));
            let now = frontend_drops(&c);
            for i in 0..N {
                *if i == x {
                    &mut drops_away
                } else {
                    &mut drops_all
                } += now[i] - seen[i];
            }
            seen = now;
            nodes.drivers[x] = Some(connect(&sw, x));
            reconnects += 1;
            round += 1;
        }));
        bg.stop.store(true, Ordering::Relaxed);
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    });
    let took = t0.elapsed();
    let c = drain(&sw, &mut nodes, &veth, &bg.api);
    check(&nodes.ledger, &c, "the end");
    alive(&sw, pid);
    let fp_end = footprint(&sw, &bg);
    let fp_start = fp_start.expect("a start footprint");

    // ----- the report -----
    let l = &nodes.ledger;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "soak: duration {:.1} s ({round} rounds, {checkpoints} checkpoints)",
        took.as_secs_f64()
    );
    let moved: u64 = l.got.iter().sum();
    let _ = writeln!(
        out,
        "soak: frames sent {} (a broadcast counts once), {moved} moved (received: every copy), \
         {:.0} moved/s",
        l.sent_total(),
        moved as f64 / took.as_secs_f64()
    );
    for r in 0..=N {
        let per: Vec<String> = (0..=N)
            .filter(|&s| s != r)
            .map(|s| {
                let bc = if s < N {
                    format!(", bc {}/{}", l.bc_got[r][s], l.bc_sent[s])
                } else {
                    String::new()
                };
                format!("{} {}/{}{bc}", name(s), l.uni_got[r][s], l.uni_sent[s][r])
            })
            .collect();
        let _ = writeln!(
            out,
            "soak:   into {:>4}: {:>9} of {:>9} (received/sent per stream: {})",
            name(r),
            l.got[r],
            l.got[r] + l.missing(r),
            per.join("; ")
        );
    }
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for p in &c.ports {
        for (k, v) in p.total.rx_dropped.iter().chain(&p.total.tx_dropped) {
            if *v > 0 {
                *reasons.entry(format!("{}:{k}", p.port)).or_default() += v;
            }
        }
    }
    let _ = writeln!(
        out,
        "soak: drops by reason {reasons:?}; host socket rx {} tx {}; veth (host rx, tx, peer rx, tx) {:?}; \
         uncounted 0",
        c.host_rx_dropped, c.host_tx_dropped, c.veth_dropped
    );
    let _ = writeln!(
        out,
        "soak: frontend port drops while connected {drops_all}, while away {drops_away} \
         (frames sent to a frontend that had hung up)"
    );
    let _ = writeln!(
        out,
        "soak: frontend restarts survived (hang up, traffic to the absent port, connect again): \
         {reconnects} {disconnects:?}; switch restarts 0 (pid {pid} throughout)"
    );
    let api = &bg.api;
    let _ = writeln!(
        out,
        "soak: API requests served {} ({} reads, {} writes); ports added {}, removed {}",
        api.reads.load(Ordering::Relaxed) + api.writes.load(Ordering::Relaxed),
        api.reads.load(Ordering::Relaxed),
        api.writes.load(Ordering::Relaxed),
        api.ports_added.load(Ordering::Relaxed),
        api.ports_removed.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "soak: switch footprint after warm-up fds {} shared maps {} ({} KiB) RSS {} KiB; \
         at the end fds {} shared maps {} ({} KiB) RSS {} KiB (bound +{} KiB)",
        fp_start.fds,
        fp_start.shared_maps,
        fp_start.shared_kb,
        fp_start.rss_kb,
        fp_end.fds,
        fp_end.shared_maps,
        fp_end.shared_kb,
        fp_end.rss_kb,
        a.rss_slack_kb
    );
    print!("{out}");
    fp_end.assert_no_growth(&fp_start, a.rss_slack_kb, "the soak");
    if round < 2 || reconnects == 0 || api.ports_added.load(Ordering::Relaxed) == 0 {
        fail!("too little happened: {round} rounds, {reconnects} reconnects");
    }
    // The frontends hang up; the switch stops on SIGTERM, cleanly.
    drop(nodes);
    let st = sw.stop();
    if !st.success() {
        fail!("the switch exited with {st} on SIGTERM");
    }
    println!("soak: the switch stopped cleanly on SIGTERM");
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    if vhost_net_backend::sys::unix::effective_uid() != 0 {
        eprintln!("soak FAILED: needs root (network namespaces, AF_PACKET)");
        return ExitCode::FAILURE;
    }
    match std::panic::catch_unwind(|| soak(&a)) {
        Ok(()) => {
            println!("soak: verdict PASS");
            ExitCode::SUCCESS
        }
        Err(_) => {
            eprintln!("soak: verdict FAIL (see above)");
            ExitCode::FAILURE
        }
    }
}

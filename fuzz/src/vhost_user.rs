// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The vhost-user request path of a port fed a fuzzed message stream.
//!
//! One real [`Port`] (server role, two queue pairs, its queue pairs
//! dropped so ring hand-offs are immediate) per process; each input is one
//! connection to its socket: up to [`MAX_MESSAGES`] messages decoded from
//! the input, each a well-formed request (header, payload, file
//! descriptors: memfds of fuzzed sizes up to [`MAX_MEMFD`] for
//! `SET_MEM_TABLE`, `ADD_MEM_REG`, `SET_LOG_BASE`; eventfds for kick, call,
//! err, `SET_LOG_FD`, `SET_BACKEND_REQ_FD`) with fields drawn from
//! interesting classes (ring numbers past the queue count, sizes, region
//! tables overlapping or past their file, features outside the offer), or
//! raw bytes (any request code, flags and size, any payload, eventfds).
//! The harness sends them all, shuts its side down and reads the replies
//! until the port closes the connection.
//!
//! Oracle: the port ends the connection within [`REPLY_TIMEOUT`] (no
//! hang); every reply is well-formed (version 1, reply flag, complete, at
//! most 4 KiB of payload) and answers, in order, a message that could have
//! one (a `GET_*` or a `NEED_REPLY`); acks are 0 or 1; `GET_FEATURES`,
//! `GET_PROTOCOL_FEATURES`, `GET_QUEUE_NUM`, `GET_MAX_MEM_SLOTS` answer the
//! offer. Up to the first raw message (after which the stream may be out
//! of step) a small model of the negotiation says which messages the spec
//! forbids: a ring number >= the queue count, a ring size of 0, above
//! 32768 or (split rings) not a power of two, features or protocol
//! features outside the offer, a memory region that is empty, wraps, or
//! lies past its file, regions that overlap, a second `SET_OWNER`. After
//! such a message nothing may be answered: the port refused it and closed
//! the connection (and a `NEED_REPLY` it answered is a NACK). The one
//! documented exception: `SET_VRING_ENABLE` before `PROTOCOL_FEATURES` is
//! acked is NACKed and the connection stays. After each input a fresh
//! connection must find a reset device (nothing acked, no ring running)
//! that answers `GET_FEATURES`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use vhost_net_backend::device::{self, bits, Offloads};
use vhost_net_backend::{Port, PortConfig};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::input::{Enc, Input};

/// Most messages per input.
pub const MAX_MESSAGES: usize = 24;
/// Largest memfd (bytes).
pub const MAX_MEMFD: u64 = 4 * 4096;
/// How long the port may take to answer and close.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Queue pairs of the port (so vrings 0-3 exist).
pub const QUEUE_PAIRS: u16 = 2;

const VRINGS: u32 = QUEUE_PAIRS as u32 * 2;
const NEED_REPLY: u32 = 0x8;
/// `VHOST_USER_PROTOCOL_F_REPLY_ACK`.
const REPLY_ACK: u64 = 1 << 3;

/// Request codes (vhost-user spec).
pub mod req {
    #![allow(missing_docs)]
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_LOG_BASE: u32 = 6;
    pub const SET_LOG_FD: u32 = 7;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const GET_QUEUE_NUM: u32 = 17;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const SEND_RARP: u32 = 19;
    pub const NET_SET_MTU: u32 = 20;
    pub const SET_BACKEND_REQ_FD: u32 = 21;
    pub const GET_CONFIG: u32 = 24;
    pub const SET_CONFIG: u32 = 25;
    pub const GET_INFLIGHT_FD: u32 = 31;
    pub const RESET_DEVICE: u32 = 34;
    pub const GET_MAX_MEM_SLOTS: u32 = 36;
    pub const ADD_MEM_REG: u32 = 37;
    pub const REM_MEM_REG: u32 = 38;
    pub const SET_STATUS: u32 = 39;
    pub const GET_STATUS: u32 = 40;
}

/// The structured requests, by selector.
const TABLE: [u32; 30] = [
    req::GET_FEATURES,
    req::SET_FEATURES,
    req::SET_OWNER,
    req::RESET_OWNER,
    req::SET_MEM_TABLE,
    req::SET_LOG_BASE,
    req::SET_LOG_FD,
    req::SET_VRING_NUM,
    req::SET_VRING_ADDR,
    req::SET_VRING_BASE,
    req::GET_VRING_BASE,
    req::SET_VRING_KICK,
    req::SET_VRING_CALL,
    req::SET_VRING_ERR,
    req::GET_PROTOCOL_FEATURES,
    req::SET_PROTOCOL_FEATURES,
    req::GET_QUEUE_NUM,
    req::SET_VRING_ENABLE,
    req::SEND_RARP,
    req::NET_SET_MTU,
    req::SET_BACKEND_REQ_FD,
    req::GET_CONFIG,
    req::SET_CONFIG,
    req::GET_INFLIGHT_FD,
    req::RESET_DEVICE,
    req::GET_MAX_MEM_SLOTS,
    req::ADD_MEM_REG,
    req::REM_MEM_REG,
    req::SET_STATUS,
    req::GET_STATUS,
];

fn is_get(code: u32) -> bool {
    matches!(
        code,
        req::GET_FEATURES
            | req::GET_VRING_BASE
            | req::GET_PROTOCOL_FEATURES
            | req::GET_QUEUE_NUM
            | req::GET_CONFIG
            | req::GET_INFLIGHT_FD
            | req::GET_MAX_MEM_SLOTS
            | req::GET_STATUS
    )
}

struct Fixture {
    port: Port,
    socket: PathBuf,
    _dir: Dir,
    files: u64,
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fixture() -> &'static Mutex<Fixture> {
    static F: OnceLock<Mutex<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        remove_stale_dirs();
        let dir = std::env::temp_dir().join(format!("vhu-fuzz-vu-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let socket = dir.join("port.sock");
        let mut cfg = PortConfig::new("fuzz", &socket);
        cfg.queue_pairs = QUEUE_PAIRS;
        // Dropping the queue pairs: no data plane, ring changes apply at once.
        let (port, _qps) = Port::new(cfg).expect("port");
        Mutex::new(Fixture {
            port,
            socket,
            _dir: Dir(dir),
            files: 0,
        })
    })
}

/// Removes the directories of fixtures whose process is gone: the fixture
/// lives for the whole process (a static), so its `Drop` never runs and
/// each fuzzing or replay process would leave its socket directory behind.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("vhu-fuzz-vu-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn offered() -> u64 {
    device::offered_features(QUEUE_PAIRS, Offloads::none(), None)
}

fn offered_protocol() -> u64 {
    device::offered_protocol_features().bits()
}

/// A shared-memory file of `size` bytes (unlinked at once).
fn memfd(fx: &mut Fixture, size: u64) -> File {
    fx.files += 1;
    let p =
        PathBuf::from("/dev/shm").join(format!("vhu-fuzz-vu-{}-{}", std::process::id(), fx.files));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .expect("shm file");
    let _ = std::fs::remove_file(&p);
    f.set_len(size).expect("set_len");
    f
}

enum Fd {
    File(File),
    Event(EventFd),
}

impl Fd {
    fn raw(&self) -> i32 {
        match self {
            Fd::File(f) => f.as_raw_fd(),
            Fd::Event(e) => e.as_raw_fd(),
        }
    }
}

fn eventfd() -> Fd {
    Fd::Event(EventFd::new(0).expect("eventfd"))
}

/// One message to send.
struct Msg {
    code: u32,
    flags: u32,
    payload: Vec<u8>,
    fds: Vec<Fd>,
    /// The header's size when it is not the payload's (raw messages).
    size: Option<u32>,
    /// Raw bytes: the stream may be out of step from here on.
    raw: bool,
    /// What the model says of it.
    verdict: Verdict,
    /// The model is sure no reply comes: a `NEED_REPLY` the `vhost` crate
    /// ignores because `REPLY_ACK` is not negotiated (replies carry no
    /// sequence number, so the matching must know which are missing).
    silent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing known (or allowed).
    Unknown,
    /// The spec forbids it: refused, connection closed.
    Refused(&'static str),
    /// Refused with a NACK, the connection stays (early SET_VRING_ENABLE).
    Nacked,
}

/// The negotiation model.
#[derive(Debug, Default)]
struct Model {
    /// Acked features (as the port's mirror has them).
    acked: u64,
    owned: bool,
    /// `GET_FEATURES` was answered (the `vhost` crate keeps the offer).
    offer_seen: bool,
    /// The last `SET_PROTOCOL_FEATURES` had `REPLY_ACK`.
    reply_ack_asked: bool,
    /// Gave up (a raw message).
    lost: bool,
}

impl Model {
    fn packed_possible(&self) -> bool {
        self.acked & bits::RING_PACKED != 0
    }

    /// Whether the `vhost` crate answers `NEED_REPLY` (its rule: the offer
    /// it read has `PROTOCOL_FEATURES` and the acked protocol features
    /// have `REPLY_ACK`; neither is reset by `RESET_OWNER`).
    fn reply_ack(&self) -> bool {
        self.offer_seen && offered() & bits::PROTOCOL_FEATURES != 0 && self.reply_ack_asked
    }
}

fn index(inp: &mut Input) -> u32 {
    let b = inp.u8();
    if b & 0x80 != 0 {
        inp.u32()
    } else {
        u32::from(b % 6)
    }
}

struct Region {
    gpa: u64,
    size: u64,
    va: u64,
    offset: u64,
    file: u64,
}

impl Region {
    fn bytes(&self, e: &mut Vec<u8>) {
        for v in [self.gpa, self.size, self.va, self.offset] {
            e.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Why the spec (and the port) refuse it, if it does.
    fn invalid(&self) -> Option<&'static str> {
        if self.size == 0 {
            return Some("empty region");
        }
        if self.gpa.checked_add(self.size).is_none() || self.va.checked_add(self.size).is_none() {
            return Some("region wraps");
        }
        match self.offset.checked_add(self.size) {
            Some(end) if end <= self.file => None,
            _ => Some("region past its file"),
        }
    }
}

fn region(fx: &mut Fixture, inp: &mut Input, k: u64) -> (Region, File) {
    let c = inp.u8();
    let file = 4096 * (1 + u64::from(c % 4));
    let size = match (c >> 2) % 8 {
        0..=3 => file,
        4 => file / 2,
        5 => file + 4096,
        6 => 0,
        _ => inp.u64(),
    };
    let gpa = match (c >> 5) % 4 {
        0 | 1 => k * 0x10_0000,
        2 => k * 0x10_0000 + 0x1000,
        _ => inp.u64(),
    };
    let o = inp.u8();
    let offset = match o % 4 {
        0 | 1 => 0,
        2 => 4096,
        _ => inp.u64(),
    };
    let va = match (o >> 2) % 4 {
        0 | 1 => 0x7f00_0000_0000 + k * 0x10_0000,
        2 => 0x7f00_0000_0000 + 0x1000,
        _ => inp.u64(),
    };
    let f = memfd(fx, file);
    (
        Region {
            gpa,
            size,
            va,
            offset,
            file,
        },
        f,
    )
}

fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

fn vring_ok(i: u32) -> Verdict {
    if i >= VRINGS {
        Verdict::Refused("ring number >= queue count")
    } else {
        Verdict::Unknown
    }
}

fn structured(fx: &mut Fixture, inp: &mut Input, m: &mut Model, sel: u8) -> Msg {
    let code = TABLE[usize::from(sel) % TABLE.len()];
    let fl = inp.u8();
    let flags = 1 | if fl & 1 != 0 { NEED_REPLY } else { 0 };
    let mut p = Vec::new();
    let mut fds = Vec::new();
    let mut verdict = Verdict::Unknown;
    match code {
        req::SET_FEATURES => {
            let v = match fl >> 1 & 3 {
                0 => offered(),
                1 => offered() & inp.u64(),
                2 => offered() & !bits::PROTOCOL_FEATURES & inp.u64(),
                _ => inp.u64(),
            };
            p.extend_from_slice(&v.to_le_bytes());
            if v & !offered() != 0 {
                verdict = Verdict::Refused("features outside the offer");
            } else {
                m.acked = v;
            }
        }
        req::SET_PROTOCOL_FEATURES => {
            let v = match fl >> 1 & 3 {
                0 | 1 => offered_protocol(),
                2 => offered_protocol() & inp.u64(),
                _ => inp.u64(),
            };
            p.extend_from_slice(&v.to_le_bytes());
            if v & !offered_protocol() != 0 {
                verdict = Verdict::Refused("protocol features outside the offer");
            }
            m.reply_ack_asked = v & REPLY_ACK != 0;
        }
        req::GET_FEATURES => m.offer_seen = true,
        req::SET_OWNER => {
            if m.owned {
                verdict = Verdict::Refused("second SET_OWNER");
            }
            m.owned = true;
        }
        req::RESET_OWNER => {
            m.owned = false;
            m.acked = 0;
        }
        req::RESET_DEVICE => m.acked = 0,
        req::SET_MEM_TABLE | req::ADD_MEM_REG | req::REM_MEM_REG => {
            let n = match code {
                req::SET_MEM_TABLE => 1 + usize::from(fl >> 1 & 3),
                _ => 1,
            };
            let mut regions = Vec::new();
            for k in 0..n {
                let (r, f) = region(fx, inp, k as u64);
                if code != req::REM_MEM_REG {
                    fds.push(Fd::File(f));
                }
                regions.push(r);
            }
            if code == req::SET_MEM_TABLE {
                p.extend_from_slice(&(n as u32).to_le_bytes());
                p.extend_from_slice(&0u32.to_le_bytes());
            } else {
                p.extend_from_slice(&0u64.to_le_bytes());
            }
            regions.iter().for_each(|r| r.bytes(&mut p));
            if code != req::REM_MEM_REG {
                if let Some(why) = regions.iter().find_map(Region::invalid) {
                    verdict = Verdict::Refused(why);
                }
            }
            if code == req::SET_MEM_TABLE && verdict == Verdict::Unknown {
                for (i, a) in regions.iter().enumerate() {
                    for b in &regions[i + 1..] {
                        if overlap((a.gpa, a.size), (b.gpa, b.size))
                            || overlap((a.va, a.size), (b.va, b.size))
                        {
                            verdict = Verdict::Refused("regions overlap");
                        }
                    }
                }
            }
        }
        req::SET_LOG_BASE => {
            let c = inp.u8();
            let file = 4096 * (1 + u64::from(c % 4));
            let size = match c >> 2 & 3 {
                0 => file,
                1 => 64,
                2 => 0,
                _ => inp.u64(),
            };
            let off = if c & 0x10 != 0 { inp.u64() } else { 0 };
            p.extend_from_slice(&size.to_le_bytes());
            p.extend_from_slice(&off.to_le_bytes());
            fds.push(Fd::File(memfd(fx, file)));
        }
        req::SET_LOG_FD | req::SET_BACKEND_REQ_FD => fds.push(eventfd()),
        req::SET_VRING_NUM | req::SET_VRING_BASE | req::GET_VRING_BASE => {
            let i = index(inp);
            let c = inp.u8();
            let num = match c % 8 {
                0..=2 => 256,
                3 => 0,
                4 => 1 << (inp.u8() % 17),
                5 => 32768 + 1,
                6 => 100,
                _ => inp.u32(),
            };
            p.extend_from_slice(&i.to_le_bytes());
            p.extend_from_slice(&num.to_le_bytes());
            verdict = vring_ok(i);
            if code == req::SET_VRING_NUM && verdict == Verdict::Unknown {
                if num == 0 || num > 32768 {
                    verdict = Verdict::Refused("ring size 0 or above 32768");
                } else if !num.is_power_of_two() && !m.packed_possible() {
                    verdict = Verdict::Refused("split ring size not a power of two");
                }
            }
            if code == req::SET_VRING_BASE
                && verdict == Verdict::Unknown
                && num > 0xffff
                && !m.packed_possible()
            {
                verdict = Verdict::Refused("split ring base above 16 bits");
            }
        }
        req::SET_VRING_ADDR => {
            let i = index(inp);
            let c = inp.u8();
            let base = 0x7f00_0000_0000u64;
            let mut addr = |k: u8| match k % 4 {
                k @ 0..=2 => base + u64::from(k) * 0x400,
                _ if inp.u8() & 1 == 0 => base + 0x3,
                _ => inp.u64(),
            };
            let (d, u, a) = (addr(c), addr(c >> 2), addr(c >> 4));
            p.extend_from_slice(&i.to_le_bytes());
            p.extend_from_slice(&u32::from(c >> 6 & 1).to_le_bytes());
            for v in [d, u, a, 0] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            verdict = vring_ok(i);
        }
        req::SET_VRING_KICK | req::SET_VRING_CALL | req::SET_VRING_ERR => {
            let i = index(inp);
            let nofd = fl & 2 != 0;
            let v = u64::from(i) | if nofd { 0x100 } else { 0 };
            p.extend_from_slice(&v.to_le_bytes());
            if !nofd {
                fds.push(eventfd());
            }
            // The index travels in bits 0-7, bit 8 is "no fd"; the higher
            // bits are ignored, as by the `vhost` crate, DPDK's vhost
            // library and QEMU's libvhost-user (a ring number >= 256 thus
            // names ring `i & 0xff`).
            if i & 0xff >= VRINGS {
                verdict = Verdict::Refused("ring number >= queue count");
            }
        }
        req::SET_VRING_ENABLE => {
            let i = index(inp);
            let on = u32::from(inp.u8() & 1);
            p.extend_from_slice(&i.to_le_bytes());
            p.extend_from_slice(&on.to_le_bytes());
            if i >= VRINGS {
                verdict = if m.acked & bits::PROTOCOL_FEATURES == 0 && flags & NEED_REPLY != 0 {
                    Verdict::Nacked
                } else {
                    Verdict::Refused("ring number >= queue count")
                };
            }
        }
        req::GET_CONFIG | req::SET_CONFIG => {
            let n = u32::from(inp.u8() % 16);
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&n.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.resize(12 + n as usize, 0);
        }
        req::GET_INFLIGHT_FD => p.resize(24, 0),
        req::SEND_RARP | req::NET_SET_MTU | req::SET_STATUS => {
            p.extend_from_slice(&inp.u64().to_le_bytes());
        }
        _ => {}
    }
    // The port takes these itself and answers a NEED_REPLY whatever was
    // negotiated (`intercept` in control/intercept.rs).
    let port_answers = match code {
        req::SET_VRING_ENABLE => m.acked & bits::PROTOCOL_FEATURES == 0,
        req::SET_LOG_FD | req::SEND_RARP => true,
        _ => false,
    };
    let silent = flags & NEED_REPLY != 0
        && !is_get(code)
        && code != req::SET_LOG_BASE
        && verdict == Verdict::Unknown
        && !m.lost
        && !port_answers
        && !m.reply_ack();
    Msg {
        code,
        flags,
        payload: p,
        size: None,
        fds,
        raw: false,
        verdict,
        silent,
    }
}

fn raw(inp: &mut Input) -> Msg {
    let code = u32::from(inp.u8());
    let flags = inp.u32();
    let n = usize::from(inp.u8() % 64);
    let payload: Vec<u8> = (0..n).map(|_| inp.u8()).collect();
    let c = inp.u8();
    let fds = (0..c % 4).map(|_| eventfd()).collect();
    // A stated size that may disagree with the payload.
    let size = (c & 0x80 != 0).then(|| inp.u32() % 0x2000);
    Msg {
        code,
        flags,
        payload,
        size,
        fds,
        raw: true,
        verdict: Verdict::Unknown,
        silent: false,
    }
}

impl Msg {
    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + self.payload.len());
        b.extend_from_slice(&self.code.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.size.unwrap_or(self.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.payload);
        b
    }

    fn can_reply(&self) -> bool {
        // The `vhost` crate answers SET_LOG_BASE whatever its flags.
        !self.silent
            && (is_get(self.code)
                || self.code == req::SET_LOG_BASE
                || self.flags & NEED_REPLY != 0
                || self.raw)
    }
}

/// What one input did: messages sent, replies read, the index of the
/// first message the model says is refused.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Messages sent (all of them, even after the port closed).
    pub sent: usize,
    /// Replies read: (request code, payload).
    pub replies: Vec<(u32, Vec<u8>)>,
    /// The first message the spec forbids, and why.
    pub refused: Option<(usize, &'static str)>,
}

fn read_all(s: &mut UnixStream) -> Vec<u8> {
    let start = Instant::now();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        assert!(
            start.elapsed() < REPLY_TIMEOUT,
            "the port did not close the connection within {REPLY_TIMEOUT:?}"
        );
        match s.read(&mut chunk) {
            Ok(0) => return buf,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("the port did not close the connection within {REPLY_TIMEOUT:?} (read timed out)")
            }
            Err(e) => panic!("reading replies: {e}"),
        }
    }
}

fn u64_of(p: &[u8]) -> Option<u64> {
    p.try_into().ok().map(u64::from_le_bytes)
}

/// Whether to print each message (`VHU_FUZZ_TRACE=1`, for triage).
fn trace() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VHU_FUZZ_TRACE").is_some())
}

/// Runs one input; panics on a finding.
pub fn outcome(data: &[u8]) -> Outcome {
    let mut fx = fixture().lock().unwrap_or_else(|p| p.into_inner());
    let mut inp = Input::new(data);
    let mut model = Model::default();
    let mut msgs: Vec<Msg> = Vec::new();
    while !inp.is_empty() && msgs.len() < MAX_MESSAGES {
        let sel = inp.u8();
        let m = if sel == 0xff {
            model.lost = true;
            raw(&mut inp)
        } else {
            let mut m = structured(&mut fx, &mut inp, &mut model, sel);
            if model.lost {
                m.verdict = Verdict::Unknown;
                m.silent = false;
            }
            m
        };
        msgs.push(m);
    }
    if trace() {
        for (i, m) in msgs.iter().enumerate() {
            eprintln!(
                "#{i}: code {} flags {:#x} payload {:02x?} fds {} raw {} {:?}",
                m.code,
                m.flags,
                m.payload,
                m.fds.len(),
                m.raw,
                m.verdict
            );
        }
    }
    let mut out = Outcome {
        sent: msgs.len(),
        ..Outcome::default()
    };
    out.refused = msgs.iter().enumerate().find_map(|(i, m)| match m.verdict {
        Verdict::Refused(why) => Some((i, why)),
        _ => None,
    });
    let mut s = UnixStream::connect(&fx.socket).expect("connect to the port");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
    s.set_write_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
    for m in &msgs {
        let b = m.bytes();
        let fds: Vec<i32> = m.fds.iter().map(Fd::raw).collect();
        // The port may have closed the connection already.
        if s.send_with_fds(&[&b[..]], &fds).is_err() {
            break;
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let buf = read_all(&mut s);

    // Parse and match the replies.
    let mut at = 0;
    let mut cursor = 0;
    let mut matched: Vec<(usize, Vec<u8>)> = Vec::new();
    while at < buf.len() {
        assert!(
            buf.len() - at >= 12,
            "a partial reply header: {:?}",
            &buf[at..]
        );
        let w = |i: usize| u32::from_le_bytes(buf[at + i..at + i + 4].try_into().unwrap());
        let (code, flags, size) = (w(0), w(4), w(8) as usize);
        assert_eq!(
            flags & 0x3,
            1,
            "reply to {code}: version in flags {flags:#x}"
        );
        assert!(
            flags & 0x4 != 0,
            "reply to {code} without the reply flag: {flags:#x}"
        );
        assert!(size <= 4096, "reply to {code}: payload of {size} bytes");
        assert!(
            buf.len() - at - 12 >= size,
            "reply to {code}: partial payload"
        );
        let payload = buf[at + 12..at + 12 + size].to_vec();
        at += 12 + size;
        let Some(k) = (cursor..msgs.len()).find(|&k| msgs[k].code == code && msgs[k].can_reply())
        else {
            panic!(
                "reply to {code} matches no message from #{cursor} on (sent: {:?})",
                msgs.iter().map(|m| m.code).collect::<Vec<_>>()
            );
        };
        cursor = k + 1;
        if trace() {
            eprintln!("reply to #{k} ({code}): {payload:02x?}");
        }
        let m = &msgs[k];
        if !m.raw {
            match code {
                req::GET_FEATURES => {
                    assert_eq!(u64_of(&payload), Some(offered()), "GET_FEATURES")
                }
                req::GET_PROTOCOL_FEATURES => assert_eq!(
                    u64_of(&payload),
                    Some(offered_protocol()),
                    "GET_PROTOCOL_FEATURES"
                ),
                req::GET_QUEUE_NUM => {
                    assert_eq!(
                        u64_of(&payload),
                        Some(u64::from(QUEUE_PAIRS)),
                        "GET_QUEUE_NUM"
                    )
                }
                req::GET_MAX_MEM_SLOTS => {
                    assert_eq!(u64_of(&payload), Some(509), "GET_MAX_MEM_SLOTS")
                }
                // The `vhost` crate answers SET_LOG_BASE (LOG_SHMFD) with
                // the log's description, not an ack (QEMU reads the header
                // only).
                req::SET_LOG_BASE => {
                    assert!(matches!(size, 8 | 16), "SET_LOG_BASE reply of {size}")
                }
                c if !is_get(c) => {
                    let v = u64_of(&payload);
                    assert!(matches!(v, Some(0 | 1)), "ack of {c}: {payload:?}");
                    if matches!(m.verdict, Verdict::Refused(_) | Verdict::Nacked) {
                        assert_eq!(v, Some(1), "message #{k} ({c}, {:?}) acked", m.verdict);
                    }
                }
                _ => {}
            }
        }
        matched.push((k, payload.clone()));
        out.replies.push((code, payload));
    }
    if let Some((r, why)) = out.refused {
        if let Some((k, _)) = matched.iter().find(|(k, _)| *k > r) {
            panic!(
                "message #{r} ({}) must be refused ({why}) and the connection closed, \
                 but message #{k} ({}) was answered",
                msgs[r].code, msgs[*k].code
            );
        }
    }
    drop(s);
    // The port serves a fresh connection on a reset device.
    assert_eq!(
        fx.port.acked_features(),
        0,
        "acked features after the connection"
    );
    assert_eq!(
        fx.port.running_queue_pairs(),
        0,
        "rings running after the connection"
    );
    let mut s = UnixStream::connect(&fx.socket).expect("reconnect");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
    let mut probe = Vec::new();
    probe.extend_from_slice(&req::GET_FEATURES.to_le_bytes());
    probe.extend_from_slice(&1u32.to_le_bytes());
    probe.extend_from_slice(&0u32.to_le_bytes());
    s.write_all(&probe).expect("probe");
    let _ = s.shutdown(std::net::Shutdown::Write);
    let b = read_all(&mut s);
    assert_eq!(b.len(), 20, "GET_FEATURES on a fresh connection: {b:?}");
    assert_eq!(
        u64_of(&b[12..20]),
        Some(offered()),
        "GET_FEATURES on a fresh connection"
    );
    out
}

/// Runs one input (the libFuzzer entry).
pub fn run(data: &[u8]) -> bool {
    outcome(data);
    true
}

/// Selector of request `code` in the structured table.
fn sel(code: u32) -> u8 {
    TABLE.iter().position(|&c| c == code).expect("in the table") as u8
}

/// The generated seeds: (name, bytes).
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    // QEMU's order: features, owner, protocol features (REPLY_ACK), queue
    // number, memory table, rings set up and started, then GET_VRING_BASE.
    let mut e = Enc::default();
    e.u8(sel(req::GET_FEATURES)).u8(0);
    e.u8(sel(req::SET_OWNER)).u8(0);
    e.u8(sel(req::GET_PROTOCOL_FEATURES)).u8(0);
    e.u8(sel(req::SET_FEATURES)).u8(0);
    e.u8(sel(req::SET_PROTOCOL_FEATURES)).u8(0);
    e.u8(sel(req::GET_QUEUE_NUM)).u8(1);
    e.u8(sel(req::GET_MAX_MEM_SLOTS)).u8(0);
    e.u8(sel(req::SET_MEM_TABLE))
        .u8(1 | 1 << 1)
        .u8(3)
        .u8(0)
        .u8(0)
        .u8(0);
    for ring in 0..2u8 {
        e.u8(sel(req::SET_VRING_NUM)).u8(1).u8(ring).u8(0);
        e.u8(sel(req::SET_VRING_BASE)).u8(1).u8(ring).u8(3);
        e.u8(sel(req::SET_VRING_ADDR)).u8(1).u8(ring).u8(0b10_01_00);
        e.u8(sel(req::SET_VRING_KICK)).u8(1).u8(ring);
        e.u8(sel(req::SET_VRING_CALL)).u8(1).u8(ring);
        e.u8(sel(req::SET_VRING_ENABLE)).u8(1).u8(ring).u8(1);
    }
    e.u8(sel(req::GET_VRING_BASE)).u8(0).u8(0).u8(0);
    v.push(("qemu-bring-up".to_owned(), e.0));
    // Refusals, each the first of its input.
    let refusals: [(&str, Vec<u8>); 6] = [
        (
            "ring-index-out-of-range",
            vec![sel(req::SET_VRING_NUM), 0, 4, 0],
        ),
        (
            "ring-size-not-power-of-two",
            vec![sel(req::SET_VRING_NUM), 0, 0, 6],
        ),
        ("features-outside-offer", {
            let mut b = vec![sel(req::SET_FEATURES), 3 << 1];
            b.extend_from_slice(&u64::MAX.to_le_bytes());
            b
        }),
        // Two regions at the same guest address.
        (
            "regions-overlap",
            [sel(req::SET_MEM_TABLE), 1 << 1, 0, 0, 3 << 5]
                .into_iter()
                .chain([0; 9])
                .collect(),
        ),
        // A region one page longer than its file.
        (
            "region-past-file",
            vec![sel(req::SET_MEM_TABLE), 0, 5 << 2, 0],
        ),
        (
            "second-owner",
            vec![sel(req::SET_OWNER), 0, sel(req::SET_OWNER), 0],
        ),
    ];
    for (name, mut b) in refusals {
        // Then a GET_FEATURES that must go unanswered.
        b.extend_from_slice(&[sel(req::GET_FEATURES), 0]);
        v.push((format!("refuse-{name}"), b));
    }
    // Early SET_VRING_ENABLE out of range with NEED_REPLY: NACKed, the
    // connection stays; raw bytes after it.
    let mut e = Enc::default();
    e.u8(sel(req::SET_VRING_ENABLE)).u8(1).u8(5).u8(1);
    e.u8(sel(req::GET_FEATURES)).u8(0);
    e.u8(0xff).u8(1).u32(0x9).u8(4).u32(7).u8(1);
    e.u8(sel(req::GET_FEATURES)).u8(0);
    v.push(("early-enable-nack-then-raw".to_owned(), e.0));
    v
}

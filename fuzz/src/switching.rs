// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch's forwarding step against a reference model.
//!
//! The real thing: one `vhu_switch::pmd::Pmd` (`poll_once`) over four
//! in-process loopback guests (`test_utils::LoopbackGuest`, split rings,
//! `MRG_RXBUF`), each a port with a fuzzed VLAN mode (access, trunk with
//! an allowed set and a native VLAN, the default) and optionally locked to
//! one source MAC, over a small FDB (fuzzed limits). Events: rounds (up to
//! four frames posted on each port's TX ring, then one PMD round), static
//! entries added and removed, the learned entries flushed, a port's entries
//! removed, and a port taken out of the PMD and put back (a port event: its
//! unit is polled last afterwards, as the PMD's `swap_remove` orders it).
//!
//! The PMD decides with `vhu_switch::decide::decide` (the function the
//! `switching` criterion bench times), so this target checks that
//! decision as it runs, kept decisions and delivery included.
//!
//! The model ([`Model`]), written plainly from the documentation of
//! `decide`, `vlan` and `fdb`: a map `(vlan, mac) -> (port, static)`,
//! learning deferred to the end of each source burst (the PMD's design: the
//! burst reads the table as it was), a frame whose unicast destination is
//! on the ingress port (in the table or learned in this burst) dropped as
//! `hairpin` (a frame to its own new source address too; to its own
//! address that is static on another port: forwarded there),
//! broadcast/multicast/unknown flooded to the VLAN's other members (none:
//! a `vlan_denied` drop), each copy's 802.1Q tag kept, popped, pushed or
//! rewritten as the egress port's mode says (priority bits kept).
//!
//! Oracle after every event: every guest received exactly the frames the
//! model says, byte for byte (tag edits included) and in order, with a
//! plain `virtio_net_hdr`; each port's decision drops by reason
//! (`malformed`, `spoofed`, `vlan_denied`, `hairpin`) equal the model's;
//! the FDB's entries (VLAN, MAC, port, origin), its counters (learned,
//! moved, limit hits, static conflicts) and each port's learned count equal
//! the model's.

use std::collections::BTreeMap;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::{LoopbackGuest, LoopbackOpts};
use vhost_net_backend::{DropReason, PollMode};
use vhu_switch::capture::CaptureTap;
use vhu_switch::decide::Ingress;
use vhu_switch::endpoint::End;
use vhu_switch::fdb::{Fdb, FdbConfig, Origin};
use vhu_switch::pmd::{load_drops, new_pmd, Command, Pmd, PmdHandle, PortCounters, PortDp};
use vhu_switch::vlan::{VlanMode, VlanSet};

use crate::input::{Enc, Input};

/// Ports (loopback guests).
pub const PORTS: usize = 4;
/// Most events per input.
pub const MAX_EVENTS: usize = 32;
/// Most frames per port per round (well under the PMD's burst of 32).
pub const MAX_FRAMES: u8 = 4;

/// The MAC of pool entry `i`: unicast, broadcast, multicast and zero
/// addresses.
pub fn mac(i: u8) -> [u8; 6] {
    match i % 16 {
        10 => [0xff; 6],
        11 => [0x01, 0x00, 0x5e, 0, 0, 1],
        12 => [0; 6],
        13 => [0x33, 0x33, 0, 0, 0, 1],
        k @ 14..=15 => [2, 0, 0, 0, 1, k],
        k => [2, 0, 0, 0, 0, k],
    }
}

/// The VLAN of pool entry `i` (static entries).
pub fn vlan(i: u8) -> u16 {
    [0, 1, 2, 3, 4094, 100][usize::from(i % 6)]
}

/// A port's VLAN mode, plainly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Access to this VLAN.
    Access(u16),
    /// Trunk: tagged frames of these VLANs, untagged ones in `native`.
    Trunk {
        /// Allowed VLANs (`None`: every id 1-4094).
        allowed: Option<Vec<u16>>,
        /// VLAN of untagged frames.
        native: Option<u16>,
    },
}

impl Mode {
    fn decode(m: u8) -> Self {
        match m % 4 {
            0 => Mode::Trunk {
                allowed: None,
                native: Some(0),
            },
            1 => Mode::Access(1 + u16::from((m >> 2) % 3)),
            2 => Mode::Trunk {
                allowed: Some((1..=3).filter(|v| (m >> 2) & (1 << (v - 1)) != 0).collect()),
                native: match (m >> 5) % 4 {
                    0 => None,
                    k => Some(u16::from(k)),
                },
            },
            _ => Mode::Trunk {
                allowed: Some(vec![2, 4094]),
                native: Some(1),
            },
        }
    }

    fn real(&self) -> VlanMode {
        match self {
            Mode::Access(a) => VlanMode::Access(*a),
            Mode::Trunk { allowed, native } => VlanMode::Trunk {
                allowed: match allowed {
                    None => VlanSet::all(),
                    Some(v) => {
                        let mut s = VlanSet::empty();
                        v.iter().for_each(|&a| s.insert(a));
                        s
                    }
                },
                native: *native,
            },
        }
    }

    fn allows(&self, v: u16) -> bool {
        match self {
            Mode::Trunk { allowed: None, .. } => (1..=4094).contains(&v),
            Mode::Trunk {
                allowed: Some(a), ..
            } => a.contains(&v),
            Mode::Access(_) => false,
        }
    }

    /// The VLAN a frame with this outer 802.1Q TCI is admitted into.
    fn ingress(&self, tci: Option<u16>) -> Option<u16> {
        let vid = tci.map(|t| t & 0xfff).filter(|&v| v != 0);
        match (self, vid) {
            (Mode::Access(a), None) => Some(*a),
            (Mode::Access(_), Some(_)) => None,
            (Mode::Trunk { native, .. }, None) => *native,
            (m, Some(v)) => m.allows(v).then_some(v),
        }
    }

    /// How a frame of `vlan` leaves: `None` not a member, `Some(None)`
    /// untagged, `Some(Some(v))` tagged.
    fn egress(&self, vlan: u16) -> Option<Option<u16>> {
        match self {
            Mode::Access(a) => (*a == vlan).then_some(None),
            Mode::Trunk { native, .. } if *native == Some(vlan) => Some(None),
            m => m.allows(vlan).then_some(Some(vlan)),
        }
    }
}

/// The frame as it leaves a port with `egress`, from the frame as it
/// arrived with outer 802.1Q `tci`.
fn edited(frame: &[u8], tci: Option<u16>, egress: Option<u16>) -> Vec<u8> {
    let mut f = frame.to_vec();
    match (tci, egress) {
        (None, None) => {}
        (Some(_), None) => {
            f.drain(12..16);
        }
        (None, Some(v)) => {
            let tag = [0x81, 0x00, (v >> 8) as u8, v as u8];
            f.splice(12..12, tag);
        }
        (Some(t), Some(v)) => {
            let n = (t & 0xf000) | v;
            f[14..16].copy_from_slice(&n.to_be_bytes());
        }
    }
    f
}

/// A frame to post: its bytes and the outer 802.1Q TCI it carries.
#[derive(Debug, Clone)]
struct Frame {
    bytes: Vec<u8>,
    dst: [u8; 6],
    src: [u8; 6],
    tci: Option<u16>,
}

fn frame(inp: &mut Input, seq: u16) -> Frame {
    let (d, s, t, l) = (inp.u8(), inp.u8(), inp.u8(), inp.u8());
    let (dst, src) = (mac(d), mac(s));
    let pcp = u16::from(t >> 5) << 13;
    let mut f = Vec::with_capacity(96);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    let tci = match t % 8 {
        0..=2 => None,
        3 => Some(pcp),
        4 => Some(pcp | 1),
        5 => Some(pcp | 2),
        6 => Some(pcp | if t & 0x10 != 0 { 4095 } else { 3 }),
        _ => {
            // A service tag first: not a C-tag, so the frame counts as
            // untagged (its tags are payload to the switch).
            f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x05, 0x81, 0x00, 0x00, 0x02]);
            None
        }
    };
    if t % 8 != 7 {
        if let Some(tci) = tci {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&tci.to_be_bytes());
        }
    }
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(60 + usize::from(l % 32), l);
    Frame {
        bytes: f,
        dst,
        src,
        tci,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    port: u32,
    fixed: bool,
}

/// The reference model.
#[derive(Debug, Default)]
struct Model {
    modes: Vec<Mode>,
    locks: Vec<Option<[u8; 6]>>,
    max_entries: usize,
    max_per_port: usize,
    fdb: BTreeMap<(u16, [u8; 6]), Entry>,
    learned: u64,
    moved: u64,
    limit_hits: u64,
    static_conflicts: u64,
    /// Decision drops per port: malformed, spoofed, vlan_denied, hairpin.
    drops: Vec<[u64; 4]>,
    /// Frames each guest should have received since the last check.
    rx: Vec<Vec<Vec<u8>>>,
    /// Ports in the PMD, in the order it polls them.
    order: Vec<u32>,
}

impl Model {
    fn learned_on(&self, p: u32) -> usize {
        self.fdb
            .values()
            .filter(|e| e.port == p && !e.fixed)
            .count()
    }

    fn learn(&mut self, vlan: u16, mac: [u8; 6], p: u32) {
        let k = (vlan, mac);
        let old = self.fdb.get(&k).copied();
        match old {
            Some(e) if e.fixed && e.port != p => {
                self.static_conflicts += 1;
                return;
            }
            Some(e) if e.port == p => return,
            _ => {}
        }
        if self.learned_on(p) >= self.max_per_port {
            self.limit_hits += 1;
            return;
        }
        match old {
            Some(_) => self.moved += 1,
            None if self.fdb.len() >= self.max_entries => {
                self.limit_hits += 1;
                return;
            }
            None => self.learned += 1,
        }
        self.fdb.insert(
            k,
            Entry {
                port: p,
                fixed: false,
            },
        );
    }

    /// One source burst of port `p`.
    fn burst(&mut self, p: u32, frames: &[Frame]) {
        let pi = p as usize;
        let mut learns: Vec<(u16, [u8; 6])> = Vec::new();
        for f in frames {
            if f.src[0] & 1 != 0 || f.src == [0; 6] {
                self.drops[pi][0] += 1;
                continue;
            }
            if self.locks[pi].is_some_and(|m| m != f.src) {
                self.drops[pi][1] += 1;
                continue;
            }
            let Some(v) = self.modes[pi].ingress(f.tci) else {
                self.drops[pi][2] += 1;
                continue;
            };
            match self.fdb.get(&(v, f.src)) {
                Some(e) if e.fixed && e.port != p => self.static_conflicts += 1,
                Some(e) if e.port == p => {}
                _ => {
                    if !learns.contains(&(v, f.src)) {
                        learns.push((v, f.src));
                    }
                }
            }
            let to: Vec<u32> = if f.dst[0] & 1 != 0 {
                self.order.iter().copied().filter(|&q| q != p).collect()
            } else if learns.contains(&(v, f.dst)) {
                // On the ingress port (learned when the burst ends).
                self.drops[pi][3] += 1;
                continue;
            } else {
                match self.fdb.get(&(v, f.dst)) {
                    Some(e) if e.port == p => {
                        self.drops[pi][3] += 1;
                        continue;
                    }
                    Some(e) => {
                        let q = e.port;
                        if !self.order.contains(&q) || self.modes[q as usize].egress(v).is_none() {
                            self.drops[pi][2] += 1;
                            continue;
                        }
                        vec![q]
                    }
                    None => self.order.iter().copied().filter(|&q| q != p).collect(),
                }
            };
            let mut members = 0;
            for q in to {
                if let Some(eg) = self.modes[q as usize].egress(v) {
                    self.rx[q as usize].push(edited(&f.bytes, f.tci, eg));
                    members += 1;
                }
            }
            if members == 0 {
                // A flood into a VLAN no other port is in.
                self.drops[pi][2] += 1;
            }
        }
        for (v, m) in learns {
            self.learn(v, m, p);
        }
    }
}

/// The real switch: a PMD over the guests.
struct Real {
    pmd: Pmd,
    handle: PmdHandle,
    fdb: Arc<RwLock<Fdb>>,
    guests: Vec<LoopbackGuest>,
    counters: Vec<Arc<PortCounters>>,
    /// A port taken out of the PMD: what it handed back.
    out: Vec<Option<vhu_switch::pmd::Removed>>,
}

fn fdb_write(f: &RwLock<Fdb>) -> std::sync::RwLockWriteGuard<'_, Fdb> {
    f.write().unwrap_or_else(|p| p.into_inner())
}

impl Real {
    fn new(m: &Model) -> Self {
        let fdb = Arc::new(RwLock::new(Fdb::new(FdbConfig {
            max_entries: m.max_entries,
            max_per_port: m.max_per_port,
            ..FdbConfig::default()
        })));
        let (pmd, handle) =
            new_pmd(0, PollMode::Busy, Arc::clone(&fdb), Instant::now()).expect("pmd");
        let mut guests = Vec::new();
        let mut counters = Vec::new();
        for id in 0..PORTS as u32 {
            let mut lg = LoopbackGuest::new(LoopbackOpts {
                packed: false,
                size: 256,
                features: bits::EVENT_IDX | bits::MRG_RXBUF,
                buf_len: 256,
                rx_buf_len: Some(256),
            });
            let ingress = Ingress {
                id,
                vlan: m.modes[id as usize].real(),
                macs: m.locks[id as usize].into_iter().collect(),
            };
            let c = Arc::new(PortCounters::default());
            let (port, units) = PortDp::new(
                id,
                format!("g{id}"),
                ingress,
                None,
                Arc::clone(&c),
                Arc::new(CaptureTap::default()),
                End::Guest(vec![lg.take_qp()]),
            );
            let (ack, _answer) = sync_channel(4);
            handle.send(Command::AddPort(port, ack.clone()));
            for u in units {
                handle.send(Command::AddUnit(Box::new(u), ack.clone()));
            }
            guests.push(lg);
            counters.push(c);
        }
        let mut r = Real {
            pmd,
            handle,
            fdb,
            guests,
            counters,
            out: (0..PORTS).map(|_| None).collect(),
        };
        for g in &mut r.guests {
            g.post_rx(256);
        }
        r.pmd.poll_once();
        r
    }
}

/// The outcome of one input: events run, frames delivered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Events run.
    pub events: usize,
    /// Frames the guests received.
    pub delivered: usize,
    /// Decision drops.
    pub dropped: u64,
    /// FDB entries at the end.
    pub entries: usize,
}

fn check(real: &mut Real, m: &mut Model, what: &str, out: &mut Outcome) {
    for (i, g) in real.guests.iter_mut().enumerate() {
        let mut got = Vec::new();
        let hl = g.hdr_len();
        g.reap_rx_with(&mut |b| got.push(b.to_vec()));
        g.post_rx(256);
        let want = std::mem::take(&mut m.rx[i]);
        let frames: Vec<Vec<u8>> = got
            .iter()
            .map(|b| {
                assert_eq!(&b[..10], &[0u8; 10], "{what}: port {i}: virtio_net_hdr");
                assert_eq!(&b[10..hl], &[1, 0], "{what}: port {i}: num_buffers");
                b[hl..].to_vec()
            })
            .collect();
        assert_eq!(frames, want, "{what}: frames received by port {i}");
        out.delivered += frames.len();
    }
    for (i, c) in real.counters.iter().enumerate() {
        let d = load_drops(&c.tx_drops);
        let got = [
            DropReason::Malformed,
            DropReason::Spoofed,
            DropReason::VlanDenied,
            DropReason::Hairpin,
        ]
        .map(|r| d.get(r));
        assert_eq!(
            got, m.drops[i],
            "{what}: port {i} drops (malformed, spoofed, vlan, hairpin)"
        );
        assert_eq!(
            d.total(),
            got.iter().sum::<u64>(),
            "{what}: port {i}: other drops {d:?}"
        );
    }
    let fdb = real.fdb.read().unwrap_or_else(|p| p.into_inner());
    // Aging is 300 s: nothing expires within an input (read at time 0,
    // every entry is live).
    let got: Vec<_> = fdb
        .entries(0)
        .into_iter()
        .map(|e| (e.vlan, e.mac, e.port, e.origin == Origin::Static))
        .collect();
    let want: Vec<_> = m
        .fdb
        .iter()
        .map(|(&(v, mac), e)| (v, mac, e.port, e.fixed))
        .collect();
    assert_eq!(got, want, "{what}: FDB entries (vlan, mac, port, static)");
    let c = fdb.counters();
    assert_eq!(
        (c.learned, c.moved, c.limit_hits, c.static_conflicts, c.aged),
        (m.learned, m.moved, m.limit_hits, m.static_conflicts, 0),
        "{what}: FDB counters (learned, moved, limit hits, static conflicts, aged)"
    );
    for p in 0..PORTS as u32 {
        assert_eq!(
            fdb.learned_on(p),
            m.learned_on(p),
            "{what}: learned entries on port {p}"
        );
    }
    out.entries = want.len();
}

/// Whether to print each event (`VHU_FUZZ_TRACE=1`, for triage).
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VHU_FUZZ_TRACE").is_some())
}

/// Runs one input; returns what it did (for the seed tests).
pub fn outcome(data: &[u8]) -> Outcome {
    let mut inp = Input::new(data);
    let mut m = Model {
        modes: (0..PORTS).map(|_| Mode::decode(inp.u8())).collect(),
        locks: (0..PORTS)
            .map(|_| {
                let l = inp.u8();
                (l & 1 != 0).then(|| mac((l >> 1) % 4))
            })
            .collect(),
        ..Model::default()
    };
    m.max_entries = 4 + usize::from(inp.u8() % 8);
    m.max_per_port = 1 + usize::from(inp.u8() % 4);
    m.drops = vec![[0; 4]; PORTS];
    m.rx = vec![Vec::new(); PORTS];
    m.order = (0..PORTS as u32).collect();
    if trace() {
        eprintln!(
            "modes {:?} locks {:?} max_entries {} max_per_port {}",
            m.modes, m.locks, m.max_entries, m.max_per_port
        );
    }
    let mut real = Real::new(&m);
    let mut out = Outcome::default();
    let mut seq = 0u16;
    while !inp.is_empty() && out.events < MAX_EVENTS {
        out.events += 1;
        let op = inp.u8();
        let what = format!("event {} (op {op})", out.events);
        match op % 8 {
            0..=4 => {
                // A round: frames on every port that is in the PMD.
                let mut posted: Vec<Vec<Frame>> = vec![Vec::new(); PORTS];
                for (p, list) in posted.iter_mut().enumerate() {
                    let n = inp.u8() % (MAX_FRAMES + 1);
                    if !m.order.contains(&(p as u32)) {
                        continue;
                    }
                    for _ in 0..n {
                        seq = seq.wrapping_add(1);
                        let f = frame(&mut inp, seq);
                        assert_eq!(real.guests[p].post_tx(&f.bytes, 1), 1);
                        list.push(f);
                    }
                }
                let total: usize = posted.iter().map(Vec::len).sum();
                let moved = real.pmd.poll_once();
                assert_eq!(moved, total, "{what}: frames the PMD took");
                for (p, list) in posted.iter().enumerate() {
                    assert_eq!(real.guests[p].reap_tx(), list.len(), "{what}: TX of {p}");
                }
                if trace() {
                    for (p, list) in posted.iter().enumerate() {
                        for f in list {
                            eprintln!(
                                "{what}: port {p} sends {:02x?} -> {:02x?} tci {:?}",
                                f.src, f.dst, f.tci
                            );
                        }
                    }
                }
                for p in m.order.clone() {
                    m.burst(p, &posted[p as usize]);
                }
            }
            5 => {
                let (v, mc, p) = (vlan(inp.u8()), mac(inp.u8()), inp.u8() % PORTS as u8);
                let p = u32::from(p);
                if m.order.contains(&p) && mc[0] & 1 == 0 {
                    let r = fdb_write(&real.fdb).add_static(v, &mc, p);
                    let k = (v, mc);
                    let want = if m.fdb.contains_key(&k) || m.fdb.len() < m.max_entries {
                        m.fdb.insert(
                            k,
                            Entry {
                                port: p,
                                fixed: true,
                            },
                        );
                        Ok(())
                    } else {
                        Err(vhu_switch::fdb::FdbFull)
                    };
                    if trace() {
                        eprintln!("{what}: static {v} {mc:02x?} on {p}: {r:?}");
                    }
                    assert_eq!(r, want, "{what}: add_static");
                }
            }
            6 => {
                let (v, mc) = (vlan(inp.u8()), mac(inp.u8()));
                let r = fdb_write(&real.fdb).remove_static(v, &mc);
                if trace() {
                    eprintln!("{what}: remove static {v} {mc:02x?}: {r}");
                }
                let want = m.fdb.get(&(v, mc)).is_some_and(|e| e.fixed);
                if want {
                    m.fdb.remove(&(v, mc));
                }
                assert_eq!(r, want, "{what}: remove_static");
            }
            _ => {
                let a = inp.u8();
                let p = u32::from(a >> 2) % PORTS as u32;
                if trace() {
                    let k = [
                        "flush learned",
                        "remove entries of",
                        "port event",
                        "port event",
                    ];
                    eprintln!("{what}: {} port {p}", k[usize::from(a % 4)]);
                }
                match a % 4 {
                    0 => {
                        let n = fdb_write(&real.fdb).flush_learned();
                        let before = m.fdb.len();
                        m.fdb.retain(|_, e| e.fixed);
                        assert_eq!(n, before - m.fdb.len(), "{what}: flush_learned");
                    }
                    1 => {
                        let n = fdb_write(&real.fdb).remove_port(p);
                        let before = m.fdb.len();
                        m.fdb.retain(|_, e| e.port != p);
                        assert_eq!(n, before - m.fdb.len(), "{what}: remove_port");
                    }
                    _ => port_event(&mut real, &mut m, p, &what),
                }
            }
        }
        check(&mut real, &mut m, &what, &mut out);
    }
    out.dropped = m.drops.iter().flatten().sum();
    out
}

/// Takes port `p` out of the PMD (and its entries out of the FDB, as the
/// switch does when a port goes), or puts it back.
fn port_event(real: &mut Real, m: &mut Model, p: u32, what: &str) {
    let pi = p as usize;
    match real.out[pi].take() {
        None => {
            let (ack, answer) = sync_channel(1);
            assert!(real.handle.send(Command::Remove(p, ack)));
            assert_eq!(real.pmd.poll_once(), 0, "{what}: remove round");
            let removed = answer.try_recv().expect("the PMD answers Remove");
            assert_eq!(removed.units.len(), 1, "{what}: units handed back");
            assert!(removed.port.is_some(), "{what}: port handed back");
            real.out[pi] = Some(removed);
            fdb_write(&real.fdb).remove_port(p);
            m.fdb.retain(|_, e| e.port != p);
            let i = m.order.iter().position(|&q| q == p).expect("in order");
            m.order.swap_remove(i);
        }
        Some(r) => {
            let (ack, _answer) = sync_channel(4);
            real.handle
                .send(Command::AddPort(r.port.expect("port"), ack.clone()));
            for u in r.units {
                real.handle.send(Command::AddUnit(Box::new(u), ack.clone()));
            }
            assert_eq!(real.pmd.poll_once(), 0, "{what}: add round");
            m.order.push(p);
        }
    }
}

/// Runs one input (the libFuzzer entry).
pub fn run(data: &[u8]) -> bool {
    outcome(data);
    true
}

/// The generated seeds: (name, bytes).
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    // Four default trunks: learning, flood, unicast, hairpin.
    let mut e = Enc::default();
    e.u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(7)
        .u8(3);
    // Round: port 0 sends broadcast from mac 0; port 1 from mac 1 to mac 0.
    e.u8(0).u8(1).u8(10).u8(0).u8(0).u8(0);
    e.u8(1).u8(0).u8(1).u8(0).u8(0);
    e.u8(0).u8(0);
    // Round: port 0 to mac 1 (known), to itself (hairpin), to unknown mac 5.
    e.u8(0)
        .u8(3)
        .u8(1)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(5)
        .u8(0)
        .u8(0)
        .u8(0);
    e.u8(0).u8(0).u8(0);
    v.push(("trunks-learn-flood".to_owned(), e.0));
    // VLANs: access 1, access 2, trunk {1,2,3} native none, trunk {2,4094}
    // native 1; tagged and untagged frames both ways, a static entry, a
    // port event, a flush.
    let mut e = Enc::default();
    e.u8(1)
        .u8(1 | 1 << 2)
        .u8(2 | 7 << 2)
        .u8(3)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(7)
        .u8(3);
    // Round: port 0 broadcast untagged; port 2 tagged VLAN 1 to mac 0;
    // port 3 untagged (native 1) from mac 3 broadcast, tagged 2 broadcast.
    e.u8(1).u8(1).u8(10).u8(0).u8(0).u8(0);
    e.u8(0);
    e.u8(1).u8(0).u8(2).u8(4 | 0xa0).u8(1);
    e.u8(2).u8(10).u8(3).u8(0).u8(2).u8(10).u8(3).u8(5).u8(3);
    // Static: VLAN 2, mac 6 on port 1.
    e.u8(5).u8(2).u8(6).u8(1);
    // Round: port 3 tagged 2 to mac 6; port 0 spoof-free QinQ broadcast.
    e.u8(2)
        .u8(1)
        .u8(10)
        .u8(0)
        .u8(7)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(1)
        .u8(6)
        .u8(3)
        .u8(5)
        .u8(9);
    // Port 1 out, round (broadcast from port 2 tagged 2), port 1 back.
    e.u8(7).u8(2 | 1 << 2);
    e.u8(3).u8(0).u8(0).u8(1).u8(10).u8(2).u8(5).u8(0).u8(0);
    e.u8(7).u8(2 | 1 << 2);
    // Flush, then a malformed source and a locked-out VLAN.
    e.u8(7).u8(0);
    e.u8(4)
        .u8(2)
        .u8(0)
        .u8(10)
        .u8(11)
        .u8(0)
        .u8(0)
        .u8(10)
        .u8(1)
        .u8(6)
        .u8(0)
        .u8(0)
        .u8(0);
    v.push(("vlans-static-port-events".to_owned(), e.0));
    // Limits: one entry per port, 4 entries in all; a locked port.
    let mut e = Enc::default();
    e.u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(1 | 2 << 1)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(0);
    for r in 0..3u8 {
        e.u8(0);
        for p in 0..4u8 {
            e.u8(2);
            e.u8(10).u8(p * 3 + r).u8(0).u8(0);
            e.u8(p).u8(p * 3 + r + 1).u8(5).u8(0);
        }
    }
    v.push(("limits-lock".to_owned(), e.0));
    v
}

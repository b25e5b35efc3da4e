// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A PMD run by hand over scripted uplinks: floods and their limit, the
//! FDB quota, kept decisions against the destination's MTU and capture.

use vhost_net_backend::DropReason;

use super::*;
use crate::capture::CaptureTap;
use crate::decide::Ingress;
use crate::endpoint::End;
use crate::fdb::FdbConfig;
use crate::test_uplink::{Frames, Scripted};
use crate::vlan::VlanMode;
use std::sync::mpsc::sync_channel;

const SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const DST: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// Where a test frame carries its number.
const NUMBER: usize = 20;

struct Ports {
    pmd: Pmd,
    /// Each port's frames to send.
    send: Vec<Frames>,
    /// Each port's frames received.
    got: Vec<Frames>,
    counters: Vec<Arc<PortCounters>>,
    captures: Vec<Arc<CaptureTap>>,
    fdb: Arc<RwLock<Fdb>>,
}

/// Three uplink ports on one PMD (run by hand) in VLAN 1: 0 the source,
/// 1 with MTU 1500 and `DST` static on it, 2 a bystander.
fn ports() -> Ports {
    ports_with(FloodLimiter::default())
}

/// [`ports`], port 0 with flood limit `flood`.
fn ports_with(flood: FloodLimiter) -> Ports {
    let mut fdb = Fdb::new(FdbConfig::default());
    fdb.add_static(1, &DST, 1).unwrap();
    let fdb = Arc::new(RwLock::new(fdb));
    let (mut pmd, handle) = new_pmd(0, PollMode::Busy, Arc::clone(&fdb), Instant::now()).unwrap();
    let (mut send, mut got, mut counters, mut captures) = (vec![], vec![], vec![], vec![]);
    let mut flood = Some(flood);
    for id in 0..3 as PortId {
        let (s, g) = (Arc::default(), Arc::default());
        let c = Arc::new(PortCounters {
            flood: if id == 0 {
                flood.take().unwrap_or_default()
            } else {
                FloodLimiter::default()
            },
            ..PortCounters::default()
        });
        let tap = Arc::new(CaptureTap::default());
        let ingress = Ingress {
            id,
            vlan: VlanMode::Access(1),
            macs: vec![],
        };
        let (dp, units) = PortDp::new(
            id,
            format!("p{id}"),
            ingress,
            (id == 1).then_some(1500),
            Arc::clone(&c),
            Arc::clone(&tap),
            End::Uplink(vec![Box::new(Scripted {
                send: Arc::clone(&s),
                got: Arc::clone(&g),
            })]),
        );
        let (ack, _answer) = sync_channel(4);
        handle.send(Command::AddPort(dp, ack.clone()));
        for u in units {
            handle.send(Command::AddUnit(Box::new(u), ack.clone()));
        }
        send.push(s);
        got.push(g);
        counters.push(c);
        captures.push(tap);
    }
    pmd.poll_once();
    Ports {
        pmd,
        send,
        got,
        counters,
        captures,
        fdb,
    }
}

/// A frame from `SRC` to `DST` of `len` bytes, numbered `n` (past the
/// 16 bytes a kept decision is keyed by).
fn frame(len: usize, n: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&DST);
    f[6..12].copy_from_slice(&SRC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[NUMBER] = n;
    f
}

/// Sends `lens` from port 0 in one burst; returns the numbers of the
/// frames port 1 received.
fn burst(p: &mut Ports, lens: &[usize]) -> Vec<u8> {
    p.got[1].lock().unwrap().clear();
    let frames = lens.iter().enumerate().map(|(n, &l)| frame(l, n as u8));
    p.send[0].lock().unwrap().extend(frames);
    assert_eq!(p.pmd.poll_once(), lens.len());
    assert!(p.got[2].lock().unwrap().is_empty(), "flooded");
    let got = p.got[1].lock().unwrap();
    got.iter().map(|f| f[NUMBER]).collect()
}

/// A broadcast frame from `src`, numbered `n`.
fn broadcast(src: [u8; 6], n: u8) -> Vec<u8> {
    let mut f = frame(64, n);
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&src);
    f
}

fn tx_dropped(p: &Ports, port: usize, r: DropReason) -> u64 {
    p.counters[port].tx_drops[r as usize].load(Ordering::Relaxed)
}

#[test]
fn floods_over_the_ports_rate_are_dropped_and_counted_unicast_is_not_limited() {
    // One frame a second, five at once: the test takes well under a
    // second (a sixth flood passes if the machine stalls for one).
    let mut p = ports_with(FloodLimiter::new(1, 5, tsc_hz()));
    for _ in 0..3 {
        let frames = (0..32u8).map(|i| {
            if i % 2 == 0 {
                broadcast(SRC, i)
            } else {
                frame(64, i)
            }
        });
        p.send[0].lock().unwrap().extend(frames);
        assert_eq!(p.pmd.poll_once(), 32);
    }
    let flooded = p.got[2].lock().unwrap().len();
    assert!((5..=6).contains(&flooded), "{flooded} floods passed");
    let unicast = p.got[1]
        .lock()
        .unwrap()
        .iter()
        .filter(|f| f[..6] == DST)
        .count();
    assert_eq!(unicast, 48, "every unicast frame passed");
    assert_eq!(
        tx_dropped(&p, 0, DropReason::FloodRate),
        48 - flooded as u64,
        "every other flood counted"
    );
    // Another port's floods are its own: not limited.
    p.got[0].lock().unwrap().clear();
    let other = [2, 0, 0, 0, 0, 7];
    p.send[2]
        .lock()
        .unwrap()
        .extend((0..32).map(|i| broadcast(other, i)));
    assert_eq!(p.pmd.poll_once(), 32);
    assert_eq!(p.got[0].lock().unwrap().len(), 32);
    assert_eq!(tx_dropped(&p, 2, DropReason::FloodRate), 0);
}

#[test]
fn a_port_at_its_fdb_quota_forwards_but_learns_nothing_more_and_counts() {
    let mut p = ports();
    p.fdb.write().unwrap().set_port_limit(0, 2);
    let src = |i: u8| [2, 0, 0, 0, 0x10, i];
    for round in 0..2u8 {
        let frames = (0..10u8).map(|i| {
            let mut f = frame(64, i);
            f[6..12].copy_from_slice(&src(round * 10 + i));
            f
        });
        p.send[0].lock().unwrap().extend(frames);
        assert_eq!(p.pmd.poll_once(), 10);
    }
    assert_eq!(p.got[1].lock().unwrap().len(), 20, "every frame forwarded");
    assert!(p.got[2].lock().unwrap().is_empty());
    let f = p.fdb.read().unwrap();
    assert_eq!(f.learned_on(0), 2);
    assert_eq!(f.lookup(1, &src(0), 0), Some(0));
    assert_eq!(f.lookup(1, &src(2), 0), None);
    assert_eq!(f.counters().limit_hits, 18);
    drop(f);
    assert_eq!(p.counters[0].fdb_learn_refused.load(Ordering::Relaxed), 18);
    // The others still learn.
    let mut g = frame(64, 0);
    g[6..12].copy_from_slice(&[2, 0, 0, 0, 0x20, 1]);
    p.send[2].lock().unwrap().push(g);
    assert_eq!(p.pmd.poll_once(), 1);
    assert_eq!(
        p.fdb.read().unwrap().lookup(1, &[2, 0, 0, 0, 0x20, 1], 0),
        Some(2)
    );
    assert_eq!(p.counters[2].fdb_learn_refused.load(Ordering::Relaxed), 0);
}

fn too_long(p: &Ports) -> u64 {
    p.counters[1].rx_drops[DropReason::TooLong as usize].load(Ordering::Relaxed)
}

#[test]
fn a_kept_decision_still_checks_each_frames_size_against_the_destination() {
    let mut p = ports();
    // The first frame fits (its delivery is kept for the others)...
    assert_eq!(burst(&mut p, &[64, 2000, 64, 2000, 64]), [0, 2, 4]);
    assert_eq!(too_long(&p), 2);
    // ...or does not (nothing kept: each frame is delivered afresh).
    assert_eq!(burst(&mut p, &[2000, 64, 64, 2000]), [1, 2]);
    assert_eq!(too_long(&p), 4);
    // The drops are the destination's: the decision dropped nothing.
    assert_eq!(
        p.counters[0]
            .tx_drops
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>(),
        0
    );
}

#[test]
fn a_capture_on_the_destination_sees_every_frame_of_a_kept_decision() {
    let mut p = ports();
    assert!(p.captures[1].start());
    assert_eq!(burst(&mut p, &[64, 64, 64, 64]), [0, 1, 2, 3]);
    let mut seen = vec![];
    while let Some(r) = p.captures[1].take() {
        assert_eq!(r.dir, crate::capture::Direction::Outbound);
        seen.push(r.data[NUMBER]);
    }
    assert_eq!(seen, [0, 1, 2, 3]);
}

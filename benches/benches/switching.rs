// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch in-process, ns per frame, with an FDB of 1, 1,000 and 100,000
//! entries:
//!
//! * `switch_decide`: the forwarding decision alone, as the PMD calls it
//!   for each frame it has no kept decision for (`vhu_switch::decide::decide`:
//!   head parse, source check, VLAN, refresh or note for learning, lookup,
//!   the burst-local hairpin rules), for a known unicast destination and for
//!   a broadcast (flood verdict), 32 frames from a known source as one
//!   burst, its learning pass included;
//! * `switch_step`: one PMD round (`Pmd::poll_once`) over four loopback
//!   guests (`test_utils::LoopbackGuest`, split rings, 64-byte frames,
//!   learning on), a burst of 32 frames from the first: known unicast to
//!   one port, and broadcast flooded to the three others (three copies per
//!   frame). The round polls all four guests' TX rings, as the switch does;
//!   only the round is timed (posting and reaping buffers, the guests' work,
//!   are not), and each iteration asserts what it moved.
//!
//! `cargo bench -p vhu-benches --bench switching`

use std::hint::black_box;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::{LoopbackGuest, LoopbackOpts};
use vhost_net_backend::PollMode;
use vhu_switch::capture::CaptureTap;
use vhu_switch::decide::{decide, Ingress, Learns, Verdict};
use vhu_switch::endpoint::End;
use vhu_switch::fdb::{Fdb, FdbConfig};
use vhu_switch::pmd::{new_pmd, Command, Pmd, PmdHandle, PortCounters, PortDp};
use vhu_switch::vlan::VlanMode;

/// Frames per iteration: a burst.
const BURST: u64 = 32;

fn mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [2, 0, b[0], b[1], b[2], b[3]]
}

/// An FDB holding `n` addresses spread over 8 ports, the ingress port of
/// the benchmark's frames, and their source (not in the table) and
/// destination addresses.
fn table(n: u32) -> (Fdb, Ingress, [u8; 6], [u8; 6]) {
    let mut fdb = Fdb::new(FdbConfig {
        max_entries: n as usize + 16,
        max_per_port: n as usize + 16,
        ..FdbConfig::default()
    });
    for i in 0..n {
        fdb.learn(0, &mac(i), i % 8, 0);
    }
    let (src, dst) = (mac(n + 1), mac(n / 2));
    let ingress = Ingress {
        id: 9,
        vlan: VlanMode::default(),
        macs: vec![],
    };
    (fdb, ingress, src, dst)
}

fn decisions(c: &mut Criterion) {
    let mut g = c.benchmark_group("switch_decide");
    g.throughput(Throughput::Elements(BURST));
    for n in [1u32, 1_000, 100_000] {
        let (mut fdb, ingress, src, dst) = table(n);
        // The source is known (learned by an earlier burst).
        fdb.learn(0, &src, ingress.id, 0);
        let mut learns = Learns::default();
        for (what, d) in [("unicast", dst), ("broadcast", [0xff; 6])] {
            let head = frame_from(d, src);
            g.bench_function(BenchmarkId::new(what, format!("fdb_{n}")), |b| {
                b.iter(|| {
                    let mut fwd = 0u32;
                    for k in 0..BURST {
                        let h = black_box(&head[..]);
                        if let Ok(d) = decide(&ingress, h, &fdb, &mut learns, k) {
                            fwd += u32::from(matches!(d.verdict, Verdict::Forward { .. }));
                        }
                    }
                    if !learns.is_empty() {
                        learns.learn_into(&mut fdb, BURST);
                    }
                    black_box(fwd)
                })
            });
        }
    }
    g.finish();
}

/// Four loopback guests on one PMD (ports 0-3, MACs `mac(1000_000 + id)`),
/// over an FDB with `n` entries on other ports and guests 1-3 known.
fn switch(n: u32) -> (Pmd, PmdHandle, Vec<LoopbackGuest>) {
    let (mut fdb, ..) = table(n);
    for id in 1..4 {
        fdb.add_static(0, &mac(1_000_000 + id), id).unwrap();
    }
    let fdb = Arc::new(RwLock::new(fdb));
    let (pmd, handle) = new_pmd(0, PollMode::Busy, fdb, Instant::now()).unwrap();
    let mut guests = Vec::new();
    for id in 0..4u32 {
        let mut lg = LoopbackGuest::new(LoopbackOpts {
            packed: false,
            size: 256,
            features: bits::EVENT_IDX | bits::MRG_RXBUF,
            buf_len: 2048,
            rx_buf_len: Some(2048),
        });
        let ingress = Ingress {
            id,
            vlan: VlanMode::default(),
            macs: vec![],
        };
        let (port, units) = PortDp::new(
            id,
            format!("g{id}"),
            ingress,
            None,
            Arc::new(PortCounters::default()),
            Arc::new(CaptureTap::default()),
            End::Guest(vec![lg.take_qp()]),
        );
        let (ack, _answer) = sync_channel(4);
        handle.send(Command::AddPort(port, ack.clone()));
        for u in units {
            handle.send(Command::AddUnit(Box::new(u), ack.clone()));
        }
        guests.push(lg);
    }
    (pmd, handle, guests)
}

/// A 64-byte IPv4 frame from `src` to `dst`.
fn frame_from(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f
}

/// A frame from guest 0.
fn frame(dst: [u8; 6]) -> Vec<u8> {
    frame_from(dst, mac(1_000_000))
}

fn steps(c: &mut Criterion) {
    let mut g = c.benchmark_group("switch_step");
    g.throughput(Throughput::Elements(BURST));
    let burst = BURST as usize;
    for n in [1u32, 1_000, 100_000] {
        let (mut pmd, _handle, mut guests) = switch(n);
        for (what, dst, dests) in [
            ("unicast", mac(1_000_001), &[1usize][..]),
            ("flood_to_3", [0xff; 6], &[1, 2, 3][..]),
        ] {
            let f = frame(dst);
            g.bench_function(BenchmarkId::new(what, format!("fdb_{n}")), |b| {
                b.iter_custom(|iters| {
                    let mut t = Duration::ZERO;
                    for _ in 0..iters {
                        assert_eq!(guests[0].post_tx(&f, burst), burst);
                        for &d in dests {
                            assert_eq!(guests[d].post_rx(burst), burst);
                        }
                        let s = Instant::now();
                        let moved = pmd.poll_once();
                        t += s.elapsed();
                        assert_eq!(moved, burst);
                        assert_eq!(guests[0].reap_tx(), burst);
                        for &d in dests {
                            assert_eq!(guests[d].reap_rx().0, burst, "port {d}");
                        }
                    }
                    t
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = decisions, steps
}
criterion_main!(benches);

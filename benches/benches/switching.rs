// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch's forwarding decision, in-process: ns per frame for
//! `vhu_switch::decide::decide` (source check, VLAN, learning, lookup) with
//! an FDB of 1, 1,000 and 100,000 entries, for a known unicast destination
//! and for a broadcast (flood verdict). The copies into destinations are
//! the burst API's and are measured in `burst`.
//!
//! `cargo bench -p vhu-benches --bench switching`

use std::hint::black_box;

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vhu_switch::decide::{decide, Head, Ingress, Verdict};
use vhu_switch::fdb::{Fdb, FdbConfig};
use vhu_switch::vlan::VlanMode;

/// Frames per iteration: a burst.
const BURST: u64 = 32;

fn mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [2, 0, b[0], b[1], b[2], b[3]]
}

/// An FDB holding `n` addresses spread over 8 ports, and the two ports the
/// benchmark's frames go between.
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
        for (what, d) in [("unicast", dst), ("broadcast", [0xff; 6])] {
            let head = Head {
                dst: d,
                src,
                tci: None,
            };
            g.bench_function(BenchmarkId::new(what, format!("fdb_{n}")), |b| {
                b.iter(|| {
                    let mut fwd = 0u32;
                    for k in 0..BURST {
                        let v = decide(&ingress, black_box(&head), &mut fdb, k);
                        fwd += u32::from(matches!(v, Verdict::Forward { .. }));
                    }
                    black_box(fwd)
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = decisions
}
criterion_main!(benches);

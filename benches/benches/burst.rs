// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! ns/frame of the burst API over in-process rings (`test_utils::LoopbackGuest`):
//! guest-TX dequeue, guest-RX enqueue (with and without mergeable buffers)
//! and the echo loop (TX of a pair reflected into its RX, one copy), for
//! 64, 512, 1514 and 9000-byte frames, bursts of 1 and 32, split and packed
//! rings; and the echo loop again with dirty-page logging on
//! (`echo_loop_dirty_log`, a live migration's cost).
//!
//! Only the device side is timed (`iter_custom`): posting buffers and
//! reaping used entries (the guest's work) happen outside the timed region.
//! One timed region holds [`TIMED_FRAMES`] frames: one burst of 32, or 32
//! bursts of 1 back to back, so the clock reads (tens of ns) are spread over
//! 32 frames and do not inflate the burst-of-1 figures. Criterion's time is
//! per timed region; its throughput (elements = frames) gives ns/frame.
//! Each iteration asserts that the bursts moved what they should, so a bench
//! cannot silently measure nothing.

use std::time::{Duration, Instant};

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vhost_net_backend::device::bits;
use vhost_net_backend::test_utils::{LoopbackGuest, LoopbackOpts};
use vhost_net_backend::VirtioNetHdr;

const SIZES: [usize; 4] = [64, 512, 1514, 9000];
const BURSTS: [usize; 2] = [1, 32];

/// Frames per timed region (see the module doc); fits the 256-entry rings
/// with 9000-byte frames over 2 KiB buffers (5 each).
const TIMED_FRAMES: usize = 32;

/// Bursts of `burst` frames per timed region.
fn bursts_per_sample(burst: usize) -> usize {
    (TIMED_FRAMES / burst).max(1)
}

fn guest(packed: bool, mrg: bool, size: usize) -> LoopbackGuest {
    guest_logged(packed, mrg, size, false)
}

/// [`guest`], with dirty-page logging on when `logged` (a live migration).
fn guest_logged(packed: bool, mrg: bool, size: usize, logged: bool) -> LoopbackGuest {
    let features = bits::EVENT_IDX | if mrg { bits::MRG_RXBUF } else { 0 };
    // With mergeable buffers RX buffers are 2 KiB (a 9000-byte frame takes
    // five); without, each buffer holds a whole frame. TX buffers have the
    // same size, so the largest frame must fit one.
    let whole = ((size + 12).next_multiple_of(64) as u32).max(2048);
    let opts = LoopbackOpts {
        packed,
        size: 256,
        features,
        buf_len: whole,
        rx_buf_len: Some(if mrg { 2048 } else { whole }),
    };
    if logged {
        LoopbackGuest::with_dirty_log(opts)
    } else {
        LoopbackGuest::new(opts)
    }
}

fn ring_name(packed: bool) -> &'static str {
    if packed {
        "packed"
    } else {
        "split"
    }
}

/// The (packed ring, frame size, burst) points of the TX and echo benches, split rings
/// first, with the name of each: `<ring>_<size>B/<burst>`.
fn points() -> impl Iterator<Item = (bool, usize, usize, BenchmarkId)> {
    [false, true].into_iter().flat_map(|packed| {
        SIZES.into_iter().flat_map(move |size| {
            BURSTS.into_iter().map(move |burst| {
                let id = BenchmarkId::new(format!("{}_{size}B", ring_name(packed)), burst);
                (packed, size, burst, id)
            })
        })
    })
}

fn dequeue(c: &mut Criterion) {
    let mut g = c.benchmark_group("guest_tx_dequeue");
    for (packed, size, burst, id) in points() {
        let frame = vec![0x5au8; size];
        let mut lg = guest(packed, true, size);
        let k = bursts_per_sample(burst);
        g.throughput(Throughput::Elements((burst * k) as u64));
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                let mut buf = [0u8; 64];
                for _ in 0..iters {
                    assert_eq!(lg.post_tx(&frame, burst * k), burst * k);
                    let mut n = 0;
                    let s = Instant::now();
                    for _ in 0..k {
                        n += lg.qp.tx.recv_burst(burst, |f| {
                            // Read what a switch reads: the private head.
                            buf[..f.head().len()].copy_from_slice(f.head());
                        });
                    }
                    t += s.elapsed();
                    assert_eq!(n, burst * k);
                    assert_eq!(lg.reap_tx(), burst * k);
                }
                std::hint::black_box(buf);
                t
            })
        });
    }
    g.finish();
}

fn enqueue(c: &mut Criterion) {
    let mut g = c.benchmark_group("guest_rx_enqueue");
    for packed in [false, true] {
        for mrg in [true, false] {
            for size in SIZES {
                for burst in BURSTS {
                    let frame = vec![0xa5u8; size];
                    let mut lg = guest(packed, mrg, size);
                    let per_frame = if mrg { (size + 12).div_ceil(2048) } else { 1 };
                    let hdr = VirtioNetHdr::default();
                    let k = bursts_per_sample(burst);
                    g.throughput(Throughput::Elements((burst * k) as u64));
                    let id = BenchmarkId::new(
                        format!(
                            "{}_{}_{size}B",
                            ring_name(packed),
                            if mrg { "mrg" } else { "nomrg" }
                        ),
                        burst,
                    );
                    g.bench_function(id, |b| {
                        b.iter_custom(|iters| {
                            let mut t = Duration::ZERO;
                            for _ in 0..iters {
                                let want = burst * per_frame * k;
                                assert_eq!(lg.post_rx(want), want);
                                let s = Instant::now();
                                for _ in 0..k {
                                    let mut rx = lg.qp.rx.burst();
                                    for _ in 0..burst {
                                        rx.push(&hdr, frame.as_slice()).expect("room");
                                    }
                                }
                                t += s.elapsed();
                                let (bufs, bytes) = lg.reap_rx();
                                assert_eq!(bufs, want);
                                assert_eq!(bytes, (k * burst * (size + 12)) as u64);
                            }
                            t
                        })
                    });
                }
            }
        }
    }
    g.finish();
}

fn echo(c: &mut Criterion) {
    echo_group(c, "echo_loop", false);
}

/// The echo loop with dirty-page logging on: what a live migration costs
/// the data plane (every RX buffer, used entry and used index marked).
fn echo_dirty_log(c: &mut Criterion) {
    echo_group(c, "echo_loop_dirty_log", true);
}

fn echo_group(c: &mut Criterion, name: &str, logged: bool) {
    let mut g = c.benchmark_group(name);
    for (packed, size, burst, id) in points() {
        let frame = vec![0x3cu8; size];
        let mut lg = guest_logged(packed, true, size, logged);
        let per_frame = (size + 12).div_ceil(2048);
        let k = bursts_per_sample(burst);
        g.throughput(Throughput::Elements((burst * k) as u64));
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                for _ in 0..iters {
                    assert_eq!(lg.post_tx(&frame, burst * k), burst * k);
                    let bufs = burst * per_frame * k;
                    assert_eq!(lg.post_rx(bufs), bufs);
                    let mut n = 0;
                    let s = Instant::now();
                    for _ in 0..k {
                        let qp = &mut lg.qp;
                        let mut rx = qp.rx.burst();
                        n += qp.tx.recv_burst(burst, |f| {
                            let head = f.head_mut();
                            let (dst, src) = head.split_at_mut(6);
                            dst.swap_with_slice(&mut src[..6]);
                            let hdr = *f.hdr();
                            rx.push(&hdr, f).expect("room");
                        });
                    }
                    t += s.elapsed();
                    assert_eq!(n, burst * k);
                    assert_eq!(lg.reap_tx(), burst * k);
                    assert_eq!(lg.reap_rx().0, bufs);
                }
                if let Some(log) = lg.dirty_log() {
                    assert!(log.count_dirty() > 0, "logging on, nothing marked");
                }
                t
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = dequeue, enqueue, echo, echo_dirty_log
}
criterion_main!(benches);

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A lock-step stream of numbered frames between two in-process drivers
//! through a running switch, checked frame by frame, on a thread of its
//! own while a test does something else to the switch (attacks it, kills
//! its peers, deletes its uplink).
//!
//! Each round queues a burst of frames on the sender (with whatever side
//! traffic the test adds to it), then takes what the receiver got within
//! 2 s, compares it with the frames expected in order and reposts as many
//! RX buffers. On [`Stream::finish`] the frames still in flight are
//! collected (5 s) and the counts handed back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{RxLayout, TestDriver};

use crate::driver::send_all;

/// What the stream did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Set to stop it.
    pub stop: AtomicBool,
    /// Frames of the stream queued on the sender.
    pub sent: AtomicU64,
    /// Frames the receiver got.
    pub recv: AtomicU64,
    /// Frames the receiver got out of order or altered.
    pub bad: AtomicU64,
}

/// The stream's thread.
#[derive(Debug)]
pub struct Stream {
    counts: Arc<Counts>,
    thread: Option<JoinHandle<()>>,
}

impl Stream {
    /// Starts streaming `frame(0)`, `frame(1)`, ... from `tx` to `rx`,
    /// `burst` a round. `side` may append side traffic to each round's
    /// burst (queued on `tx` with it); `after` runs after each round's
    /// send (traffic from other drivers, say).
    ///
    /// # Panics
    ///
    /// On the thread, when the sender's TX ring stays full for 5 s.
    pub fn start(
        mut tx: TestDriver,
        mut rx: TestDriver,
        burst: usize,
        frame: fn(u64) -> Vec<u8>,
        mut side: impl FnMut(&mut Vec<Vec<u8>>) + Send + 'static,
        mut after: impl FnMut() + Send + 'static,
    ) -> Self {
        rx.post_rx_buffers(0, 256, 2048, RxLayout::Single)
            .expect("RX buffers");
        rx.kick_rx(0);
        let counts = Arc::new(Counts::default());
        let c = Arc::clone(&counts);
        let thread = thread::spawn(move || {
            let (mut seq, mut next) = (0u64, 0u64);
            let check = |got: &[vhost_net_backend::test_utils::RxFrame], next: &mut u64| {
                for g in got {
                    if g.data != frame(*next) {
                        c.bad.fetch_add(1, Ordering::Relaxed);
                    }
                    *next += 1;
                }
                c.recv.fetch_add(got.len() as u64, Ordering::Relaxed);
            };
            while !c.stop.load(Ordering::Relaxed) {
                let mut frames: Vec<Vec<u8>> = (0..burst as u64).map(|i| frame(seq + i)).collect();
                side(&mut frames);
                let n = send_all(&mut tx, &frames, Duration::from_secs(5));
                assert_eq!(n, frames.len(), "the sender's TX ring stalled");
                seq += burst as u64;
                c.sent.store(seq, Ordering::Relaxed);
                after();
                let got = rx.recv_frames_until(0, burst, Duration::from_secs(2));
                check(&got, &mut next);
                if !got.is_empty() {
                    rx.post_rx_buffers(0, got.len(), 2048, RxLayout::Single)
                        .expect("repost RX buffers");
                    rx.kick_rx(0);
                }
            }
            // What is still in flight.
            let late = rx.recv_frames_until(0, (seq - next) as usize, Duration::from_secs(5));
            check(&late, &mut next);
            drop((tx, rx));
        });
        Self {
            counts,
            thread: Some(thread),
        }
    }

    /// Frames the receiver got so far.
    pub fn recv(&self) -> u64 {
        self.counts.recv.load(Ordering::Relaxed)
    }

    /// Frames per second the receiver got while `during` ran, called again
    /// and again for at least `window`.
    pub fn rate_while(&self, window: Duration, mut during: impl FnMut()) -> f64 {
        let (n0, t0) = (self.recv(), Instant::now());
        while t0.elapsed() < window {
            during();
        }
        (self.recv() - n0) as f64 / t0.elapsed().as_secs_f64()
    }

    /// Stops the stream, collects what is in flight and returns the counts.
    ///
    /// # Panics
    ///
    /// When the stream's thread panicked.
    pub fn finish(mut self) -> Arc<Counts> {
        self.counts.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("the stream thread");
        Arc::clone(&self.counts)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.counts.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

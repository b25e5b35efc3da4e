// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Helpers over the library's in-process virtio-net driver
//! (`vhost_net_backend::test_utils::TestDriver`) that several end-to-end
//! tests share.

use std::thread;
use std::time::{Duration, Instant};

use vhost_net_backend::test_utils::{DriverError, TestDriver, TxLayout};

/// Queues `frames` on `d`'s TX ring of queue pair 0 (reaping completions
/// while it is full) and kicks. Returns how many were queued before
/// `timeout`.
///
/// # Panics
///
/// On a driver error other than a full ring or guest memory.
pub fn send_all(d: &mut TestDriver, frames: &[Vec<u8>], timeout: Duration) -> usize {
    let hdr = d.zero_hdr();
    let t0 = Instant::now();
    let mut sent = 0;
    for f in frames {
        loop {
            match d.send_frame(0, &hdr, f, TxLayout::Single) {
                Ok(_) => break,
                Err(DriverError::RingFull { .. } | DriverError::OutOfMemory(_)) => {
                    d.kick_tx(0);
                    if t0.elapsed() > timeout {
                        return sent;
                    }
                    thread::sleep(Duration::from_micros(200));
                    d.tx_completions(0);
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        sent += 1;
    }
    d.kick_tx(0);
    d.tx_completions(0);
    sent
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! An in-memory uplink for the crate's unit tests: it sends what is queued
//! in it and keeps what the switch sends it.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use vhost_net_backend::io::{RxFn, Uplink, UplinkCounters, UplinkOffloads};
use vhost_net_backend::{DropReason, FrameSource, VirtioNetHdr};

/// Frames, shared between a test and its uplink.
pub type Frames = Arc<Mutex<Vec<Vec<u8>>>>;

/// Sends the frames queued in `send` (all in one burst, at most the
/// burst's size) and keeps what the switch sends it in `got`.
pub struct Scripted {
    pub send: Frames,
    pub got: Frames,
}

impl Scripted {
    /// An uplink that only keeps what the switch sends it.
    pub fn recorder(got: Frames) -> Self {
        Self {
            send: Frames::default(),
            got,
        }
    }
}

impl Uplink for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn rx_burst(&mut self, max: usize, f: RxFn<'_>) -> std::io::Result<usize> {
        let frames: Vec<_> = self.send.lock().unwrap().drain(..).collect();
        assert!(frames.len() <= max, "more frames queued than a burst takes");
        for b in &frames {
            f(&VirtioNetHdr::default(), b);
        }
        Ok(frames.len())
    }
    fn tx_push(&mut self, _: &VirtioNetHdr, f: &dyn FrameSource) -> Result<(), DropReason> {
        let mut b = vec![0; f.frame_len()];
        vhost_net_backend::copy_frame(f, &mut b);
        self.got.lock().unwrap().push(b);
        Ok(())
    }
    fn tx_drop(&mut self, _: DropReason) {}
    fn tx_flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn rx_fd(&self) -> RawFd {
        -1
    }
    fn offloads(&self) -> UplinkOffloads {
        UplinkOffloads::default()
    }
    fn counters(&self) -> UplinkCounters {
        UplinkCounters::default()
    }
}

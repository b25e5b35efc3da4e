// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A scripted uplink double: [`ScriptedUplink`] receives the frames a test
//! queues in its [`Script`], keeps what it is sent, and can be told to run
//! out of transmit buffers or to refuse offloads. Clones share one script,
//! so a test keeps a handle while the uplink itself moves into a data plane
//! (a switch's PMD takes a `Box<dyn Uplink>`).
//!
//! It counts like a real uplink ([`UplinkCounters`]): frames and bytes in
//! each direction, and drops by reason.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::frame::{copy_frame, FrameSource};
use crate::io::{RxFn, Uplink, UplinkCounters, UplinkOffloads};
use crate::net_hdr::VirtioNetHdr;
use crate::stats::DropReason;

/// What a [`ScriptedUplink`] does and what it saw.
#[derive(Debug, Default)]
pub struct Script {
    /// Frames the uplink receives, in order; a burst takes at most its
    /// `max` and leaves the rest for the next one.
    pub rx: VecDeque<(VirtioNetHdr, Vec<u8>)>,
    /// Frames sent through the uplink, with their headers.
    pub sent: Vec<(VirtioNetHdr, Vec<u8>)>,
    /// Pushes still to refuse with `NoBuffers` (transmit buffers full)
    /// before frames are taken again.
    pub full: usize,
    /// Frames asking for an offload (a partial checksum, a super-frame)
    /// are refused with `OffloadUnsupported`, whatever `offloads.tx` says.
    pub refuse_offloads: bool,
    /// The offloads the uplink reports.
    pub offloads: UplinkOffloads,
    /// Calls to [`Uplink::tx_flush`].
    pub flushes: usize,
    /// The guest feature sets the uplink was told about, in order.
    pub guest_features: Vec<u64>,
    /// Counters, kept as a real uplink keeps them.
    pub counters: UplinkCounters,
}

/// An in-memory [`Uplink`] driven by a [`Script`]: it receives what the
/// script queues, keeps what it is sent, and counts like a real uplink.
/// Clones share one script: keep one to watch an uplink that moved into a
/// data plane.
#[derive(Debug, Clone)]
pub struct ScriptedUplink {
    name: Arc<str>,
    script: Arc<Mutex<Script>>,
}

impl Default for ScriptedUplink {
    fn default() -> Self {
        Self::new("scripted")
    }
}

impl ScriptedUplink {
    /// An uplink named `name` with an empty script: it receives nothing,
    /// takes every frame and accepts no offloads.
    pub fn new(name: &str) -> Self {
        Self::with_script(name, Script::default())
    }

    /// An uplink named `name` playing `script`.
    pub fn with_script(name: &str, script: Script) -> Self {
        Self {
            name: name.into(),
            script: Arc::new(Mutex::new(script)),
        }
    }

    /// The script, shared by every clone of this uplink.
    ///
    /// # Panics
    /// When a thread panicked while holding it.
    pub fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().expect("script lock")
    }

    /// Queues a frame (with a zero header) for the uplink to receive.
    pub fn queue_rx(&self, frame: &[u8]) {
        self.script()
            .rx
            .push_back((VirtioNetHdr::default(), frame.to_vec()));
    }

    /// Takes the frames sent so far (their bytes), leaving none.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        self.script().sent.drain(..).map(|(_, f)| f).collect()
    }
}

impl Uplink for ScriptedUplink {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, max: usize, f: RxFn<'_>) -> std::io::Result<usize> {
        // Taken out before lending: `f` may push into this same uplink.
        let burst: Vec<_> = {
            let mut s = self.script();
            let n = max.min(s.rx.len());
            s.rx.drain(..n).collect()
        };
        for (hdr, frame) in &burst {
            f(hdr, frame);
        }
        let mut s = self.script();
        s.counters.rx_packets += burst.len() as u64;
        s.counters.rx_bytes += burst.iter().map(|(_, f)| f.len() as u64).sum::<u64>();
        Ok(burst.len())
    }

    fn tx_push(&mut self, hdr: &VirtioNetHdr, frame: &dyn FrameSource) -> Result<(), DropReason> {
        let mut s = self.script();
        if s.refuse_offloads && (hdr.is_gso() || hdr.needs_csum()) {
            return Err(DropReason::OffloadUnsupported);
        }
        if s.full > 0 {
            s.full -= 1;
            return Err(DropReason::NoBuffers);
        }
        let mut buf = vec![0; frame.frame_len()];
        copy_frame(frame, &mut buf);
        s.counters.tx_packets += 1;
        s.counters.tx_bytes += buf.len() as u64;
        s.sent.push((*hdr, buf));
        Ok(())
    }

    fn tx_drop(&mut self, reason: DropReason) {
        self.script().counters.tx_drops.add(reason, 1);
    }

    fn tx_flush(&mut self) -> std::io::Result<()> {
        self.script().flushes += 1;
        Ok(())
    }

    fn rx_fd(&self) -> RawFd {
        -1
    }

    fn offloads(&self) -> UplinkOffloads {
        self.script().offloads
    }

    fn guest_features(&mut self, acked: u64) {
        self.script().guest_features.push(acked);
    }

    fn counters(&self) -> UplinkCounters {
        self.script().counters
    }
}

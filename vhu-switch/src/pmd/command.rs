// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The command channel between the control plane and a PMD: the changes of
//! its ports ([`Command`], applied at burst boundaries and acknowledged),
//! the control plane's end of a PMD ([`PmdHandle`]), and what a PMD hands
//! back of a removed port ([`Removed`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use vhost_net_backend::io::Uplink;
use vmm_sys_util::eventfd::EventFd;

use super::dest::{PortDp, Unit};
use crate::PortId;

/// A change of a PMD's ports, applied at a burst boundary.
#[derive(Debug)]
pub enum Command {
    /// The port becomes a destination of this PMD (every PMD gets it,
    /// before any of its units is polled).
    AddPort(Arc<PortDp>, SyncSender<()>),
    /// This PMD polls the unit.
    AddUnit(Box<Unit>, SyncSender<()>),
    /// The port is gone: its units and its place as a destination are
    /// handed back (to be dropped by the control plane, outside the data
    /// plane).
    Remove(PortId, SyncSender<Removed>),
    /// Forwards the frame as if the port had sent it (its VLAN, its flood
    /// domain, never back to it): a migrated guest's announce. Answers
    /// whether the port was known.
    Inject(PortId, Box<[u8]>, SyncSender<bool>),
    /// Queue `.1` of uplink port `.0` moves frames with `.2` from now on
    /// (its interface went, or came back): the PMD polling it swaps it in
    /// at a burst boundary and hands the old one back (to be dropped by
    /// the control plane); `None` if it does not poll that queue.
    Reopen(PortId, usize, UplinkQueue, SyncSender<Option<UplinkQueue>>),
}

/// One queue of an uplink, on its way into or out of a PMD.
pub struct UplinkQueue(pub Box<dyn Uplink>);

impl std::fmt::Debug for UplinkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UplinkQueue({})", self.0.name())
    }
}

/// What a PMD hands back of a removed port.
#[derive(Debug, Default)]
pub struct Removed {
    /// The port's units this PMD polled.
    pub units: Vec<Unit>,
    /// Its table entry.
    pub port: Option<Arc<PortDp>>,
}

/// Busy and idle cycles of a PMD, and the frames it moved (its poll
/// loop's counters).
pub type PmdCounters = vhost_net_backend::LoopCycles;

/// The control plane's end of a PMD.
#[derive(Debug, Clone)]
pub struct PmdHandle {
    /// Sends commands.
    pub commands: SyncSender<Command>,
    /// Wakes the PMD to read them.
    pub wake: Arc<EventFd>,
    /// Tells a polling PMD that commands wait (one load per round, instead
    /// of a look at the channel).
    pub pending: Arc<AtomicBool>,
    /// Its counters.
    pub counters: Arc<PmdCounters>,
}

impl PmdHandle {
    /// Sends a command and wakes the PMD.
    pub fn send(&self, c: Command) -> bool {
        let ok = self.commands.send(c).is_ok();
        // After the send: the PMD clears the flag before it drains.
        self.pending.store(true, Ordering::Release);
        // A failed write means the counter is saturated: it is awake.
        let _ = self.wake.write(1);
        ok
    }
}

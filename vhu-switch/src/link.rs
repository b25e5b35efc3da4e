// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! An uplink's interface, watched. An interface can vanish under an open
//! port (`ip link del`, a driver reload, its namespace deleted) and come
//! back under the same name with a new index. The switch notices within
//! [`WATCH_EVERY`]: the port goes down (its queues are [`Detached`]: frames
//! for it are dropped and counted as `link_down`, and no PMD polls the dead
//! socket, whose error would wake it without end), and when an interface of
//! that name exists again the port's queues are opened on it anew, with
//! their counters carried on.
//!
//! Only AF_PACKET and AF_XDP uplinks are watched. A TAP is the switch's
//! own device, kept alive by its queues: it may be moved into another
//! namespace and renamed there (a pod's NIC) and must not be replaced by
//! a new device of the old name.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use vhost_net_backend::io::{interface_index, RxFn, Uplink, UplinkCounters, UplinkOffloads};
use vhost_net_backend::{DropReason, FrameSource, VirtioNetHdr};

/// How often the interfaces of the uplinks are looked up.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The interface of an uplink port, as the control plane knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its name.
    pub ifname: String,
    /// The index of the interface the queues are open on; `None` while the
    /// port is down.
    pub ifindex: Option<u32>,
    /// Whether the switch watches it (AF_PACKET and AF_XDP uplinks).
    pub watched: bool,
    /// Why the last reopen failed, logged once per distinct reason.
    pub last_error: Option<String>,
}

impl Link {
    /// The interface `ifname` an uplink was just opened on.
    pub fn opened(ifname: &str, watched: bool) -> Self {
        Self {
            ifname: ifname.to_string(),
            ifindex: index(ifname),
            watched,
            last_error: None,
        }
    }

    /// An interface the switch does not watch (a TAP).
    pub fn unwatched(ifname: &str) -> Self {
        Self {
            ifname: ifname.to_string(),
            ifindex: None,
            watched: false,
            last_error: None,
        }
    }

    /// What the lookup says has happened to the interface.
    pub fn check(&self) -> Change {
        let now = index(&self.ifname);
        match (self.ifindex, now) {
            (Some(a), Some(b)) if a == b => Change::None,
            (Some(_), _) => Change::Gone,
            (None, Some(_)) => Change::Back,
            (None, None) => Change::None,
        }
    }
}

/// What happened to a watched interface since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing: still there with the same index, or still missing.
    None,
    /// The interface the queues were open on is gone (missing, or a new
    /// interface under the same name).
    Gone,
    /// An interface of that name exists again.
    Back,
}

/// The interface's index, `None` if there is no such interface.
fn index(ifname: &str) -> Option<u32> {
    interface_index(ifname).ok()
}

/// The queue of an uplink whose interface is gone: receives nothing, drops
/// (and counts) every frame for it as `link_down`, and has no fd to poll.
#[derive(Debug)]
pub struct Detached {
    name: String,
    offloads: UplinkOffloads,
    counters: UplinkCounters,
}

impl Detached {
    /// Stands in for the queue `name` of an uplink with these offloads.
    pub fn new(name: String, offloads: UplinkOffloads) -> Self {
        Self {
            name,
            offloads,
            counters: UplinkCounters::default(),
        }
    }
}

impl Uplink for Detached {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, _max: usize, _f: RxFn<'_>) -> io::Result<usize> {
        Ok(0)
    }

    fn tx_push(&mut self, _: &VirtioNetHdr, _: &dyn FrameSource) -> Result<(), DropReason> {
        self.counters.tx_drops.add(DropReason::LinkDown, 1);
        Err(DropReason::LinkDown)
    }

    fn tx_drop(&mut self, reason: DropReason) {
        self.counters.tx_drops.add(reason, 1);
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn rx_fd(&self) -> RawFd {
        -1
    }

    fn offloads(&self) -> UplinkOffloads {
        self.offloads
    }

    fn counters(&self) -> UplinkCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_queue_counts_every_frame_as_link_down() {
        let mut d = Detached::new("af_packet:gone0".into(), UplinkOffloads::default());
        let frame: &[u8] = &[0u8; 60];
        for _ in 0..3 {
            assert_eq!(
                d.tx_push(&VirtioNetHdr::default(), &frame),
                Err(DropReason::LinkDown)
            );
        }
        d.tx_drop(DropReason::NoBuffers);
        assert_eq!(d.rx_burst(32, &mut |_, _| unreachable!()).unwrap(), 0);
        let c = d.counters();
        assert_eq!(c.tx_drops.get(DropReason::LinkDown), 3);
        assert_eq!(c.tx_drops.total(), 4);
        assert_eq!((c.tx_packets, c.rx_packets), (0, 0));
        assert_eq!(d.rx_fd(), -1);
    }

    #[test]
    fn an_interface_that_never_existed_stays_as_it_is() {
        let l = Link::opened("vhu-no-such0", true);
        assert_eq!(l.ifindex, None);
        assert_eq!(l.check(), Change::None);
        let mut up = l.clone();
        up.ifindex = Some(u32::MAX);
        assert_eq!(up.check(), Change::Gone);
        let lo = Link::opened("lo", true);
        assert!(lo.ifindex.is_some());
        assert_eq!(lo.check(), Change::None);
        let mut down = lo;
        down.ifindex = None;
        assert_eq!(down.check(), Change::Back);
    }
}

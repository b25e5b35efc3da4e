// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Fixtures of the crate's unit tests, in one place: Ethernet frames, an
//! in-memory uplink (the library's
//! [`ScriptedUplink`](vhost_net_backend::test_utils::ScriptedUplink):
//! it sends what is queued in it and keeps what the switch sends it), and a
//! PMD run by hand with ports on it.

use std::sync::mpsc::sync_channel;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use vhost_net_backend::test_utils::ScriptedUplink;
use vhost_net_backend::wire::ETH_P_8021Q;
use vhost_net_backend::PollMode;

use crate::capture::CaptureTap;
use crate::decide::Ingress;
use crate::endpoint::End;
use crate::fdb::Fdb;
use crate::pmd::{new_pmd, Command, Pmd, PmdHandle, PortCounters, PortDp};

/// An IPv4 frame of `len` bytes from `src` to `dst`, with an 802.1Q tag
/// of TCI `tci` if any; zeros after the ethertype.
pub fn eth_frame(dst: [u8; 6], src: [u8; 6], tci: Option<u16>, len: usize) -> Vec<u8> {
    let mut f = [dst, src].concat();
    if let Some(t) = tci {
        f.extend_from_slice(&ETH_P_8021Q.to_be_bytes());
        f.extend_from_slice(&t.to_be_bytes());
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.resize(len, 0);
    f
}

/// A PMD (number 0, busy polling) over `fdb`, to be run by hand
/// ([`Pmd::poll_once`]), and its handle.
pub fn hand_pmd(fdb: &Arc<RwLock<Fdb>>) -> (Pmd, PmdHandle) {
    new_pmd(0, PollMode::Busy, Arc::clone(fdb), Instant::now()).expect("a PMD")
}

/// What a port on a hand-run PMD is made of.
pub struct PortParts {
    /// What the decision needs of it (its id is the port's).
    pub ingress: Ingress,
    /// Its MTU.
    pub mtu: Option<u32>,
    /// Its counters.
    pub counters: Arc<PortCounters>,
    /// Its capture point.
    pub capture: Arc<CaptureTap>,
}

impl PortParts {
    /// Port `ingress.id`, no MTU, fresh counters and capture point.
    pub fn new(ingress: Ingress) -> Self {
        Self {
            ingress,
            mtu: None,
            counters: Arc::default(),
            capture: Arc::default(),
        }
    }
}

/// Sends port `p`, one scripted uplink queue, to the PMD of `handle`: as a
/// destination, and with `poll` also as a source the PMD polls. Applied at
/// the PMD's next round.
pub fn add_uplink_port(handle: &PmdHandle, p: PortParts, up: ScriptedUplink, poll: bool) {
    let id = p.ingress.id;
    let (dp, units) = PortDp::new(
        id,
        format!("p{id}"),
        p.ingress,
        p.mtu,
        p.counters,
        p.capture,
        End::Uplink(vec![Box::new(up)]),
    );
    let (ack, _answer) = sync_channel(4);
    handle.send(Command::AddPort(dp, ack.clone()));
    if poll {
        for u in units {
            handle.send(Command::AddUnit(Box::new(u), ack.clone()));
        }
    }
}

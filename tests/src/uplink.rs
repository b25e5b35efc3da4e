// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The uplinks `patch` can attach to (`--uplink KIND:IFNAME`) and the peer's
//! end of one, for the patch tests and the uplink benchmark.

use crate::netns::{LinkStats, Netns, VethPair};

/// An uplink kind, as `patch --uplink` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `af_xdp`.
    AfXdp,
    /// `af_packet`.
    AfPacket,
    /// `tap`.
    Tap,
}

impl Kind {
    /// The name `patch --uplink` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AfXdp => "af_xdp",
            Kind::AfPacket => "af_packet",
            Kind::Tap => "tap",
        }
    }

    /// The kind [`Kind::name`] names.
    ///
    /// # Errors
    ///
    /// For any other name.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "af_xdp" => Ok(Kind::AfXdp),
            "af_packet" => Ok(Kind::AfPacket),
            "tap" => Ok(Kind::Tap),
            o => Err(format!("unknown uplink {o:?} (af_xdp, af_packet, tap)")),
        }
    }
}

/// The peer's end of the uplink: a veth pair, or a TAP moved into a
/// namespace.
#[derive(Debug)]
pub enum PeerEnd {
    /// A veth pair: the uplink on its host end.
    Veth(VethPair),
    /// The TAP `patch` created, moved into `ns`.
    Tap {
        /// The namespace the TAP is in.
        ns: Netns,
        /// The TAP's name.
        name: String,
    },
}

impl PeerEnd {
    /// The peer's namespace.
    pub fn ns(&self) -> &Netns {
        match self {
            PeerEnd::Veth(v) => v.ns(),
            PeerEnd::Tap { ns, .. } => ns,
        }
    }

    /// The interface in the namespace.
    pub fn ifname(&self) -> &str {
        match self {
            PeerEnd::Veth(v) => v.peer(),
            PeerEnd::Tap { name, .. } => name,
        }
    }

    /// The interface's counters.
    pub fn stats(&self) -> LinkStats {
        self.ns().link_stats(self.ifname())
    }
}

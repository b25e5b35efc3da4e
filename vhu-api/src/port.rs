// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The port object: one shape in `POST /ports`, in `GET /ports/{name}` and in
//! a `[[port]]` table of the switch's configuration file.
//!
//! ```json
//! {"name": "vm1", "kind": "vhost-user", "role": "client",
//!  "socket": "/var/run/vm1.sock", "queues": 2, "vlan": 10,
//!  "mac": ["52:54:00:12:34:56"], "mtu": 1500}
//! ```
//!
//! | field | applies to | meaning |
//! |---|---|---|
//! | `name` | all | 1-64 characters of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-` |
//! | `kind` | all | `vhost-user`, `af_xdp`, `af_packet`, `tap` |
//! | `socket` | `vhost-user` | the socket: a file name under the switch's socket directory, or an absolute path (any length up to `PATH_MAX`); default `<name>.sock` for role `server`, required for `client` |
//! | `role` | `vhost-user` | `server` (the switch creates the socket; default) or `client` (the VMM did; the switch connects and reconnects) |
//! | `interface` | `af_xdp`, `af_packet`, `tap` | the network interface (for `tap`: the TAP device the switch creates or attaches to) |
//! | `netns` | `tap` | the network namespace the TAP lives in (an absolute path, e.g. `/var/run/netns/NAME`); `interface` is its name there. The switch makes such a TAP persistent: it outlives a crash or restart of the switch and is attached again where it is; removing the port deletes it |
//! | `queues` | all | queue pairs (vhost-user, 1-128) or uplink queues (1-64); default 1 |
//! | `mac` | all | the only source MACs the port may send from (anti-spoofing); default: any |
//! | `mtu` | all | largest IP packet, 68-9216; larger frames are dropped both ways and counted; offered to a vhost-user guest (`VIRTIO_NET_F_MTU`) |
//! | `vlan` | all | `10` (access port: untagged frames belong to VLAN 10; `0`: the untagged VLAN, tagged frames dropped) or `{"trunk": [10, 20], "native": 10}`; default: none, a trunk of every VLAN whose untagged frames are VLAN 0 |
//! | `mac_limit` | all | most addresses the switch learns on the port (1-1000000; its share of the FDB); beyond it a source is not learned, its frames still flow, and the refusal is counted (`fdb.learn_refused`); default: the switch's `fdb_max_per_port` (vhost-user, tap) or half its table (af_xdp, af_packet) |
//! | `flood_rate` | all | most frames per second the port may flood (broadcast, multicast, unknown unicast; 0-10000000, 0: unlimited); the others are dropped and counted (`flood_rate`); default: the switch's `flood_rate` (vhost-user, tap; 0 unless configured) or unlimited (af_xdp, af_packet) |
//! | `flood_burst` | all | how many frames over the rate a flood may bring at once (1-1000000); default: the switch's `flood_burst` |
//! | `offloads` | all | checksum and segmentation offloads; default `true` |
//! | `owner`, `group`, `mode` | `vhost-user` role `server` | the socket's owner, group (names or numeric ids) and mode (octal string, e.g. `"0660"`) |
//! | `pmd` | all | pin the port's queues to this PMD thread (index) |
//! | `zero_copy` | `af_xdp` | `off`, `try` (default) or `require` |
//! | `qdisc_bypass` | `af_packet` | bypass the qdisc layer on transmit; default `false` |
//! | `attachment` | all | who made the port (`vhu-cni`: its attachment), opaque to the switch; the CNI removes only ports carrying its own |
//!
//! Fields that do not apply to a kind are refused, not ignored.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::mac::MacAddr;

/// Longest port name.
pub const MAX_NAME_LEN: usize = 64;
/// Longest socket path (Linux `PATH_MAX`, terminating NUL excluded).
pub const MAX_SOCKET_PATH: usize = 4095;
/// Longest path component (Linux `NAME_MAX`).
pub const MAX_PATH_COMPONENT: usize = 255;
/// Longest interface name (`IFNAMSIZ` - 1).
pub const MAX_IFNAME_LEN: usize = 15;
/// Most queue pairs of a vhost-user port (the device's limit).
pub const MAX_VHOST_QUEUES: u32 = 128;
/// Most queues of an uplink.
pub const MAX_UPLINK_QUEUES: u32 = 64;
/// Smallest MTU (IPv4's minimum datagram size).
pub const MIN_MTU: u32 = 68;
/// Largest MTU: the common jumbo-frame limit of NICs and switches.
pub const MAX_MTU: u32 = 9216;
/// Valid VLAN ids (0 and 4095 are reserved by 802.1Q).
pub const VLAN_IDS: std::ops::RangeInclusive<u32> = 1..=4094;
/// The access VLAN id of the untagged VLAN: an access port of VLAN 0
/// carries untagged frames only (tagged ones are dropped), in the VLAN of
/// ports without a VLAN mode.
pub const UNTAGGED_ACCESS: u32 = 0;
/// Most source MACs a port may be locked to.
pub const MAX_MACS: usize = 64;
/// Largest `mac_limit`: more than any FDB a node holds (the switch's
/// `fdb_max_entries` caps the table anyway).
pub const MAX_MAC_LIMIT: u32 = 1_000_000;
/// Largest `flood_rate`, frames per second: above a port's line rate at
/// 64 bytes on 10 Gb/s (14.9 Mpps is 40 Gb/s).
pub const MAX_FLOOD_RATE: u32 = 10_000_000;
/// Largest `flood_burst`, frames.
pub const MAX_FLOOD_BURST: u32 = 1_000_000;

/// What a port attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PortKind {
    /// A VM or DPDK application over a vhost-user socket.
    #[default]
    #[serde(rename = "vhost-user")]
    VhostUser,
    /// A NIC through AF_XDP.
    #[serde(rename = "af_xdp")]
    AfXdp,
    /// A NIC (or veth) through AF_PACKET.
    #[serde(rename = "af_packet")]
    AfPacket,
    /// A TAP device, created by the switch (a pod- or host-facing NIC).
    #[serde(rename = "tap")]
    Tap,
}

impl PortKind {
    /// The name the API uses.
    pub const fn name(self) -> &'static str {
        match self {
            PortKind::VhostUser => "vhost-user",
            PortKind::AfXdp => "af_xdp",
            PortKind::AfPacket => "af_packet",
            PortKind::Tap => "tap",
        }
    }
}

impl fmt::Display for PortKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who creates a vhost-user socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The switch creates (listens on) the socket.
    #[default]
    Server,
    /// The VMM created it; the switch connects, and reconnects forever.
    Client,
}

/// AF_XDP zero-copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ZeroCopy {
    /// Copy mode.
    Off,
    /// Zero-copy where the driver has it, copy mode otherwise (logged).
    #[default]
    Try,
    /// Zero-copy or the port is refused.
    Require,
}

/// A port's VLAN mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vlan {
    /// Access port: its frames are untagged on the wire and belong to this
    /// VLAN inside the switch.
    Access(u32),
    /// Trunk port: tagged frames of the allowed VLANs pass with their tag;
    /// untagged frames belong to `native`, if set (and leave untagged).
    Trunk {
        /// Allowed VLAN ids.
        allowed: Vec<u32>,
        /// The VLAN of untagged frames; `None`: untagged frames are dropped.
        native: Option<u32>,
    },
}

impl Serialize for Vlan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Vlan::Access(v) => s.serialize_u32(*v),
            Vlan::Trunk { allowed, native } => {
                let mut m = s.serialize_map(Some(1 + usize::from(native.is_some())))?;
                m.serialize_entry("trunk", allowed)?;
                if let Some(n) = native {
                    m.serialize_entry("native", n)?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Vlan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vlan;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a VLAN id (an access port, e.g. 10) or {\"trunk\": [10, 20], \"native\": 10}",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vlan, E> {
                u32::try_from(v)
                    .map(Vlan::Access)
                    .map_err(|_| E::custom(format!("VLAN id {v} is out of range 1-4094")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vlan, E> {
                // TOML integers are signed.
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("VLAN id {v} is out of range 1-4094"))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Vlan, A::Error> {
                let mut allowed: Option<Vec<u32>> = None;
                let mut native: Option<u32> = None;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "trunk" if allowed.is_none() => allowed = Some(m.next_value()?),
                        "native" if native.is_none() => native = Some(m.next_value()?),
                        "trunk" | "native" => {
                            return Err(de::Error::custom(format!("vlan: duplicate field {k:?}")))
                        }
                        _ => {
                            return Err(de::Error::custom(format!(
                                "vlan: unknown field {k:?} (expected \"trunk\" and \"native\")"
                            )))
                        }
                    }
                }
                let allowed = allowed.ok_or_else(|| {
                    de::Error::custom("vlan: a trunk needs \"trunk\": [allowed VLAN ids]")
                })?;
                Ok(Vlan::Trunk { allowed, native })
            }
        }
        d.deserialize_any(V)
    }
}

/// A port, as the API and the configuration file describe it. Optional
/// fields are `None` when not given; [`PortSpec::validate`] says whether the
/// combination makes sense.
// Absent fields are `None` and are left out when written back.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// Unique name.
    pub name: String,
    /// What the port attaches to.
    pub kind: PortKind,
    /// vhost-user: the socket (file name under the socket directory, or an
    /// absolute path).
    pub socket: Option<String>,
    /// vhost-user: who creates the socket.
    pub role: Option<Role>,
    /// Uplinks and TAPs: the interface.
    pub interface: Option<String>,
    /// TAPs: the network namespace the TAP lives in (a path); `interface`
    /// is its name there.
    pub netns: Option<String>,
    /// Queue pairs (vhost-user) or queues (uplinks).
    pub queues: Option<u32>,
    /// Allowed source MACs.
    pub mac: Option<Vec<MacAddr>>,
    /// MTU.
    pub mtu: Option<u32>,
    /// VLAN mode.
    pub vlan: Option<Vlan>,
    /// Most addresses learned on the port (its share of the FDB).
    pub mac_limit: Option<u32>,
    /// Most frames per second the port may flood; 0: unlimited.
    pub flood_rate: Option<u32>,
    /// Frames a flood may bring at once beyond the rate.
    pub flood_burst: Option<u32>,
    /// Checksum and segmentation offloads.
    pub offloads: Option<bool>,
    /// vhost-user server: the socket's owner.
    pub owner: Option<String>,
    /// vhost-user server: the socket's group.
    pub group: Option<String>,
    /// vhost-user server: the socket's mode, in octal.
    pub mode: Option<String>,
    /// The PMD thread that serves this port.
    pub pmd: Option<u32>,
    /// AF_XDP zero-copy.
    pub zero_copy: Option<ZeroCopy>,
    /// AF_PACKET qdisc bypass.
    pub qdisc_bypass: Option<bool>,
    /// Who made the port, for the one who removes it: `vhu-cni` writes its
    /// attachment (`cni/<namespace>/<network>/<container id>/<ifname>`) and
    /// removes only ports that carry it. Opaque to the switch.
    pub attachment: Option<String>,
}

/// One thing wrong with a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field (`vlan`, `mac[1]`, ...).
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl PortSpec {
    /// A spec with only a name and a kind.
    pub fn new(name: impl Into<String>, kind: PortKind) -> Self {
        Self {
            name: name.into(),
            kind,
            ..Self::default()
        }
    }

    /// The socket role (default `server`).
    pub fn role(&self) -> Role {
        self.role.unwrap_or_default()
    }

    /// Queue pairs or queues (default 1).
    pub fn queues(&self) -> u32 {
        self.queues.unwrap_or(1)
    }

    /// Whether offloads are on (default `true`).
    pub fn offloads(&self) -> bool {
        self.offloads.unwrap_or(true)
    }

    /// The socket mode (default `0600` for the switch's own directory; a
    /// `mode` that does not parse counts as the default, and
    /// [`PortSpec::validate`] reports it).
    pub fn mode_bits(&self) -> u32 {
        self.mode
            .as_deref()
            .and_then(parse_mode)
            .unwrap_or(DEFAULT_SOCKET_MODE)
    }

    /// Every problem with this spec that needs no look at the host; empty
    /// when it is valid.
    pub fn validate(&self) -> Result<(), Vec<FieldError>> {
        let mut errs = Vec::new();
        let mut err = |field: &str, message: String| {
            errs.push(FieldError {
                field: field.to_owned(),
                message,
            })
        };
        if let Err(m) = check_name(&self.name) {
            err("name", m);
        }
        let vhost = self.kind == PortKind::VhostUser;
        let server = vhost && self.role() == Role::Server;
        // Fields that do not apply to this kind.
        let kind = self.kind;
        let refuse =
            |present: bool, field: &str, applies: &str, err: &mut dyn FnMut(&str, String)| {
                if present {
                    err(
                        field,
                        format!("does not apply to a {kind} port (only to {applies}); remove it"),
                    );
                }
            };
        refuse(
            !vhost && self.socket.is_some(),
            "socket",
            "vhost-user ports",
            &mut err,
        );
        refuse(
            !vhost && self.role.is_some(),
            "role",
            "vhost-user ports",
            &mut err,
        );
        refuse(
            vhost && self.interface.is_some(),
            "interface",
            "af_xdp, af_packet and tap ports",
            &mut err,
        );
        for (present, field) in [
            (self.owner.is_some(), "owner"),
            (self.group.is_some(), "group"),
            (self.mode.is_some(), "mode"),
        ] {
            refuse(
                present && !server,
                field,
                "vhost-user ports in role server, whose socket the switch creates",
                &mut err,
            );
        }
        refuse(
            kind != PortKind::Tap && self.netns.is_some(),
            "netns",
            "tap ports",
            &mut err,
        );
        refuse(
            kind != PortKind::AfXdp && self.zero_copy.is_some(),
            "zero_copy",
            "af_xdp ports",
            &mut err,
        );
        refuse(
            kind != PortKind::AfPacket && self.qdisc_bypass.is_some(),
            "qdisc_bypass",
            "af_packet ports",
            &mut err,
        );

        if vhost {
            match (&self.socket, self.role()) {
                (None, Role::Client) => err(
                    "socket",
                    "a client-role port needs the path of the socket the VMM created".to_owned(),
                ),
                (Some(s), role) => {
                    if let Err(m) = check_socket(s, role) {
                        err("socket", m);
                    }
                }
                (None, Role::Server) => {}
            }
        } else {
            match &self.interface {
                None => err(
                    "interface",
                    format!("a {kind} port needs the name of its interface"),
                ),
                Some(i) => {
                    if let Err(m) = check_ifname(i) {
                        err("interface", m);
                    }
                }
            }
        }
        if let (Some(n), PortKind::Tap) = (&self.netns, kind) {
            if let Err(m) = check_netns(n) {
                err("netns", m);
            }
        }
        if let Some(q) = self.queues {
            let max = if vhost {
                MAX_VHOST_QUEUES
            } else {
                MAX_UPLINK_QUEUES
            };
            if q == 0 || q > max {
                err("queues", format!("{q} is out of range 1-{max}"));
            }
        }
        if let Some(macs) = &self.mac {
            if macs.is_empty() {
                err(
                    "mac",
                    "an empty list would drop every frame; omit the field to allow any source"
                        .to_owned(),
                );
            }
            if macs.len() > MAX_MACS {
                err("mac", format!("at most {MAX_MACS} addresses"));
            }
            for (i, m) in macs.iter().enumerate() {
                if !m.is_unicast() {
                    err(
                        &format!("mac[{i}]"),
                        format!("{m} is not a unicast address a host can send from"),
                    );
                }
                if macs[..i].contains(m) {
                    err(&format!("mac[{i}]"), format!("{m} is listed twice"));
                }
            }
        }
        if let Some(n) = self.mac_limit {
            if n == 0 || n > MAX_MAC_LIMIT {
                err(
                    "mac_limit",
                    format!("{n} is out of range 1-{MAX_MAC_LIMIT}"),
                );
            }
        }
        if let Some(n) = self.flood_rate {
            if n > MAX_FLOOD_RATE {
                err(
                    "flood_rate",
                    format!(
                        "{n} is out of range 0-{MAX_FLOOD_RATE} (frames per second; 0: unlimited)"
                    ),
                );
            }
        }
        if let Some(n) = self.flood_burst {
            if n == 0 || n > MAX_FLOOD_BURST {
                err(
                    "flood_burst",
                    format!("{n} is out of range 1-{MAX_FLOOD_BURST}"),
                );
            }
        }
        if let Some(m) = self.mtu {
            if !(MIN_MTU..=MAX_MTU).contains(&m) {
                err("mtu", format!("{m} is out of range {MIN_MTU}-{MAX_MTU}"));
            }
        }
        match &self.vlan {
            None => {}
            Some(Vlan::Access(v)) if *v != UNTAGGED_ACCESS && !VLAN_IDS.contains(v) => {
                err(
                    "vlan",
                    format!("VLAN id {v} is out of range 1-4094 (or 0, the untagged VLAN)"),
                );
            }
            Some(Vlan::Access(_)) => {}
            Some(Vlan::Trunk { allowed, native }) => {
                if allowed.is_empty() {
                    err(
                        "vlan.trunk",
                        "a trunk needs at least one allowed VLAN id".to_owned(),
                    );
                }
                for (i, v) in allowed.iter().enumerate() {
                    if !VLAN_IDS.contains(v) {
                        err(
                            &format!("vlan.trunk[{i}]"),
                            format!("VLAN id {v} is out of range 1-4094"),
                        );
                    } else if allowed[..i].contains(v) {
                        err(
                            &format!("vlan.trunk[{i}]"),
                            format!("VLAN {v} is listed twice"),
                        );
                    }
                }
                if let Some(n) = native {
                    if !VLAN_IDS.contains(n) {
                        err("vlan.native", format!("VLAN id {n} is out of range 1-4094"));
                    } else if !allowed.contains(n) {
                        err(
                            "vlan.native",
                            format!("VLAN {n} must also be in the trunk's allowed list"),
                        );
                    }
                }
            }
        }
        for (field, v) in [("owner", &self.owner), ("group", &self.group)] {
            if let Some(v) = v {
                if let Err(m) = check_account(v) {
                    err(field, m);
                }
            }
        }
        if let Some(m) = &self.mode {
            if parse_mode(m).is_none() {
                err(
                    "mode",
                    format!("{m:?} is not an octal file mode such as \"0660\" (at most 0777)"),
                );
            }
        }
        if let Some(a) = &self.attachment {
            if a.is_empty()
                || a.len() > MAX_ATTACHMENT_LEN
                || !a.bytes().all(|c| c.is_ascii_graphic())
            {
                err(
                    "attachment",
                    format!(
                        "must be 1-{MAX_ATTACHMENT_LEN} printable ASCII characters without spaces"
                    ),
                );
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }
}

/// Longest `attachment` label.
pub const MAX_ATTACHMENT_LEN: usize = 1280;

/// Mode of a socket the switch creates when the spec gives none.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;

/// Parses an octal mode of at most `0777`.
pub fn parse_mode(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|c| (b'0'..=b'7').contains(&c)) {
        return None;
    }
    u32::from_str_radix(s, 8).ok().filter(|m| *m <= 0o777)
}

/// Checks a port name.
pub fn check_name(n: &str) -> Result<(), String> {
    if n.is_empty() || n.len() > MAX_NAME_LEN {
        return Err(format!(
            "must be 1-{MAX_NAME_LEN} characters, got {}",
            n.len()
        ));
    }
    if n.starts_with(['.', '-']) {
        return Err(format!("{n:?} must not start with '.' or '-'"));
    }
    if let Some(c) = n
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{n:?} contains {c:?}; use only letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Checks an interface name: what the kernel takes (`dev_valid_name`),
/// narrowed to printable ASCII and without `%` (the kernel would take
/// `tap%d` as a template and pick another name).
pub fn check_ifname(n: &str) -> Result<(), String> {
    if n.is_empty() || n.len() > MAX_IFNAME_LEN {
        return Err(format!(
            "interface names are 1-{MAX_IFNAME_LEN} bytes, got {} ({n:?})",
            n.len()
        ));
    }
    if n == "."
        || n == ".."
        || !n
            .bytes()
            .all(|c| c.is_ascii_graphic() && !b"/:%".contains(&c))
    {
        return Err(format!(
            "{n:?} is not a valid interface name (printable ASCII without '/', ':', '%' or \
             whitespace; not \".\" or \"..\")"
        ));
    }
    Ok(())
}

/// The checks every path field shares: at most `PATH_MAX` bytes, no NUL.
fn check_path(s: &str) -> Result<(), String> {
    if s.len() > MAX_SOCKET_PATH {
        return Err(format!(
            "is {} bytes; paths are at most {MAX_SOCKET_PATH} bytes",
            s.len()
        ));
    }
    if s.contains('\0') {
        return Err("must not contain a NUL byte".to_owned());
    }
    Ok(())
}

/// Checks a network namespace path: absolute, without `.` or `..`
/// components, not a directory; see [`check_path`].
fn check_netns(s: &str) -> Result<(), String> {
    check_path(s)?;
    if !s.starts_with('/') || s.split('/').any(|c| c == "." || c == "..") {
        return Err(format!(
            "{s:?} must be an absolute path without '.' or '..' (e.g. /var/run/netns/NAME)"
        ));
    }
    if s.ends_with('/') {
        return Err(format!("{s:?} names a directory, not a namespace file"));
    }
    Ok(())
}

/// Checks a socket path: a file name under the socket directory, or an
/// absolute path.
fn check_socket(s: &str, role: Role) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".to_owned());
    }
    check_path(s)?;
    if s.ends_with('/') {
        return Err(format!("{s:?} names a directory, not a socket"));
    }
    let absolute = s.starts_with('/');
    if !absolute {
        if role == Role::Client {
            return Err(format!(
                "{s:?}: a client-role socket is the VMM's: give its absolute path"
            ));
        }
        if s.contains('/') {
            return Err(format!(
                "{s:?}: a relative socket is a file name under the socket directory (no '/'); \
                 give an absolute path to place it elsewhere"
            ));
        }
    }
    for c in s.split('/') {
        if c == ".." || c == "." {
            return Err(format!("{s:?} must not contain \".\" or \"..\" components"));
        }
        if c.len() > MAX_PATH_COMPONENT {
            return Err(format!(
                "a path component is {} bytes; at most {MAX_PATH_COMPONENT}",
                c.len()
            ));
        }
    }
    Ok(())
}

/// Checks a user or group: a name as `useradd` takes it, or a numeric id.
fn check_account(v: &str) -> Result<(), String> {
    let numeric = !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit());
    if numeric {
        return v
            .parse::<u32>()
            .map(|_| ())
            .map_err(|_| format!("{v:?} is not a valid numeric id"));
    }
    let ok = !v.is_empty()
        && v.len() <= 32
        && !v.starts_with('-')
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!("{v:?} is not a user/group name or numeric id"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(j: &str) -> Result<PortSpec, serde_json::Error> {
        serde_json::from_str(j)
    }

    fn errors(j: &str) -> Vec<String> {
        match parse(j).expect("parses").validate() {
            Ok(()) => vec![],
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn minimal_ports_are_valid() {
        assert_eq!(
            errors(r#"{"name":"vm1","kind":"vhost-user"}"#),
            Vec::<String>::new()
        );
        assert!(errors(r#"{"name":"up","kind":"af_packet","interface":"eth0"}"#).is_empty());
        assert!(errors(r#"{"name":"t","kind":"tap","interface":"tap-pod1"}"#).is_empty());
        assert!(
            errors(r#"{"name":"t","kind":"tap","interface":"net1","netns":"/run/netns/p"}"#)
                .is_empty()
        );
        // A flood rate of 0 is no limit; a burst alone changes the
        // switch's default burst.
        assert!(errors(r#"{"name":"a","kind":"vhost-user","flood_rate":0}"#).is_empty());
        assert!(
            errors(r#"{"name":"a","kind":"af_packet","interface":"e","flood_burst":5}"#).is_empty()
        );
        let full = r#"{"name":"vm.2_x-y","kind":"vhost-user","role":"server","socket":"vm2.sock",
            "queues":4,"mac":["52:54:00:00:00:02"],"mtu":9000,"vlan":{"trunk":[10,20],"native":10},
            "offloads":false,"owner":"libvirt-qemu","group":"kvm","mode":"0660","pmd":1,
            "mac_limit":16,"flood_rate":1000,"flood_burst":100}"#;
        assert!(errors(full).is_empty(), "{:?}", errors(full));
        let p = parse(full).unwrap();
        assert_eq!(p.mode_bits(), 0o660);
        assert_eq!(p.queues(), 4);
        assert!(!p.offloads());
        // What serializes parses back to the same spec.
        let back = parse(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn vlan_forms() {
        let p = parse(r#"{"name":"a","kind":"vhost-user","vlan":10}"#).unwrap();
        assert_eq!(p.vlan, Some(Vlan::Access(10)));
        assert_eq!(serde_json::to_string(&p.vlan).unwrap(), "10");
        let p = parse(r#"{"name":"a","kind":"vhost-user","vlan":{"trunk":[5]}}"#).unwrap();
        assert_eq!(
            p.vlan,
            Some(Vlan::Trunk {
                allowed: vec![5],
                native: None
            })
        );
        for bad in [
            r#"{"name":"a","kind":"vhost-user","vlan":"10"}"#,
            r#"{"name":"a","kind":"vhost-user","vlan":-1}"#,
            r#"{"name":"a","kind":"vhost-user","vlan":{"native":1}}"#,
            r#"{"name":"a","kind":"vhost-user","vlan":{"trunk":[1],"x":2}}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wrong_types_and_unknown_fields_do_not_parse() {
        for bad in [
            r#"{"name":"a"}"#,
            r#"{"name":"a","kind":"ovs"}"#,
            r#"{"name":1,"kind":"tap"}"#,
            r#"{"name":"a","kind":"vhost-user","queues":"2"}"#,
            r#"{"name":"a","kind":"vhost-user","queues":-2}"#,
            r#"{"name":"a","kind":"vhost-user","mac":"52:54:00:00:00:01"}"#,
            r#"{"name":"a","kind":"vhost-user","mac":["52:54:00:00:00"]}"#,
            r#"{"name":"a","kind":"vhost-user","colour":"red"}"#,
            r#"{"name":"a","kind":"vhost-user","role":"master"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn invalid_values_are_each_reported() {
        let cases: &[(&str, &str)] = &[
            (r#"{"name":"","kind":"vhost-user"}"#, "name: must be 1-64"),
            (r#"{"name":"-x","kind":"vhost-user"}"#, "must not start"),
            (r#"{"name":"a b","kind":"vhost-user"}"#, "contains ' '"),
            (
                r#"{"name":"a","kind":"vhost-user","vlan":4095}"#,
                "out of range 1-4094",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","vlan":{"trunk":[0]}}"#,
                "out of range 1-4094",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","vlan":{"trunk":[]}}"#,
                "at least one",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","vlan":{"trunk":[3,3]}}"#,
                "listed twice",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","vlan":{"trunk":[3],"native":4}}"#,
                "allowed list",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","mac_limit":0}"#,
                "mac_limit: 0 is out of range 1-1000000",
            ),
            (
                r#"{"name":"a","kind":"tap","interface":"t","mac_limit":1000001}"#,
                "mac_limit: 1000001 is out of range",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","flood_rate":10000001}"#,
                "flood_rate: 10000001 is out of range 0-10000000",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","flood_burst":0}"#,
                "flood_burst: 0 is out of range 1-1000000",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","mtu":67}"#,
                "mtu: 67 is out of range",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","mtu":9217}"#,
                "out of range 68-9216",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","queues":0}"#,
                "queues: 0 is out of range 1-128",
            ),
            (r#"{"name":"a","kind":"vhost-user","queues":129}"#, "1-128"),
            (
                r#"{"name":"a","kind":"tap","interface":"t","queues":65}"#,
                "1-64",
            ),
            (r#"{"name":"a","kind":"vhost-user","mac":[]}"#, "empty list"),
            (
                r#"{"name":"a","kind":"vhost-user","mac":["ff:ff:ff:ff:ff:ff"]}"#,
                "mac[0]",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","mac":["00:00:00:00:00:00"]}"#,
                "not a unicast",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","mac":["02:00:00:00:00:01","02:00:00:00:00:01"]}"#,
                "mac[1]",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","role":"client"}"#,
                "needs the path",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","role":"client","socket":"x.sock"}"#,
                "absolute path",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","socket":"d/x.sock"}"#,
                "no '/'",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","socket":"/run/../x"}"#,
                "\"..\"",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","socket":"/run/"}"#,
                "directory",
            ),
            (r#"{"name":"a","kind":"vhost-user","mode":"0999"}"#, "octal"),
            (r#"{"name":"a","kind":"vhost-user","mode":"1777"}"#, "octal"),
            (
                r#"{"name":"a","kind":"vhost-user","owner":"bad name"}"#,
                "owner",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","role":"client","socket":"/x","mode":"0600"}"#,
                "mode: does not apply",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","interface":"eth0"}"#,
                "interface: does not apply",
            ),
            (
                r#"{"name":"a","kind":"vhost-user","zero_copy":"try"}"#,
                "zero_copy: does not apply",
            ),
            (
                r#"{"name":"a","kind":"af_xdp"}"#,
                "needs the name of its interface",
            ),
            (
                r#"{"name":"a","kind":"af_xdp","interface":"a-very-long-name0"}"#,
                "1-15 bytes",
            ),
            (
                r#"{"name":"a","kind":"af_xdp","interface":"a/b"}"#,
                "not a valid interface",
            ),
            (
                r#"{"name":"a","kind":"tap","interface":"tap%d"}"#,
                "not a valid interface",
            ),
            (
                r#"{"name":"a","kind":"tap","interface":"t\u00e4p"}"#,
                "not a valid interface",
            ),
            (
                r#"{"name":"a","kind":"af_packet","interface":"e","socket":"/x"}"#,
                "socket: does not apply",
            ),
            (
                r#"{"name":"a","kind":"af_packet","interface":"e","role":"server"}"#,
                "role: does not apply",
            ),
            (
                r#"{"name":"a","kind":"af_packet","interface":"e","zero_copy":"off"}"#,
                "zero_copy",
            ),
            (
                r#"{"name":"a","kind":"af_xdp","interface":"e","qdisc_bypass":true}"#,
                "qdisc_bypass",
            ),
            (
                r#"{"name":"a","kind":"tap","interface":"e","owner":"root"}"#,
                "owner: does not apply",
            ),
            (
                r#"{"name":"a","kind":"af_packet","interface":"e","netns":"/run/netns/x"}"#,
                "netns: does not apply",
            ),
            (
                r#"{"name":"a","kind":"tap","interface":"e","netns":"netns/x"}"#,
                "netns: \"netns/x\" must be an absolute path",
            ),
            (
                r#"{"name":"a","kind":"tap","interface":"e","netns":"/run/netns/../x"}"#,
                "without '.' or '..'",
            ),
        ];
        for (j, want) in cases {
            let got = errors(j);
            assert!(
                got.iter().any(|e| e.contains(want)),
                "{j}: want {want:?} in {got:?}"
            );
        }
    }

    #[test]
    fn all_errors_at_once() {
        let e = errors(r#"{"name":"","kind":"vhost-user","vlan":4095,"mtu":1,"queues":0}"#);
        assert_eq!(e.len(), 4, "{e:?}");
    }

    #[test]
    fn vlan_0_is_the_untagged_access_vlan() {
        let mut p = PortSpec::new("a", PortKind::VhostUser);
        p.vlan = Some(Vlan::Access(UNTAGGED_ACCESS));
        assert_eq!(p.validate(), Ok(()));
        p.attachment = Some("cni/ns/net/c1/eth1".into());
        assert_eq!(p.validate(), Ok(()));
        for bad in ["", "a b", "\u{7f}"] {
            p.attachment = Some(bad.into());
            assert!(p.validate().is_err(), "{bad:?}");
        }
        p.attachment = Some("x".repeat(MAX_ATTACHMENT_LEN + 1));
        assert!(p.validate().is_err());
    }

    #[test]
    fn long_socket_paths_are_accepted_up_to_path_max() {
        let dir = "/".to_owned() + &vec!["d".repeat(200); 19].join("/");
        let ok = format!("{dir}/vm.sock");
        assert!(ok.len() > 108 && ok.len() <= MAX_SOCKET_PATH);
        let mut p = PortSpec::new("vm", PortKind::VhostUser);
        p.socket = Some(ok);
        assert_eq!(p.validate(), Ok(()));
        p.socket = Some(format!("{dir}/{}", "x".repeat(300)));
        assert!(p.validate().is_err());
        p.socket = Some("/".to_owned() + &"d/".repeat(2100) + "s");
        assert!(p.validate().is_err());
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Least privilege: which capabilities each port kind needs, which the
//! switch keeps at start, and the refusal of a port it cannot serve.
//!
//! At start (after the configuration is read, before any other thread
//! runs) the switch keeps the capabilities it holds that the port kinds it
//! may serve can use ([`PortClass::may_use`]; all kinds unless `port_kinds`
//! names some) and drops every other one from its five sets, then sets
//! no-new-privs. A port whose kind, or option, needs a capability the
//! switch does not hold ([`required`]) is refused before anything is
//! created, with the capability and how to grant it: the API answers 422,
//! the configuration file fails validation (exit 64), a persisted port is
//! logged and listed as down.
//!
//! Measured on Linux 6.18 (docs/switch.md, "Privileges"):
//!
//! | port | needs |
//! |---|---|
//! | `vhost-user` (server or client), `pmd_cpus` pinning | nothing |
//! | `vhost-user` with `owner`/`group` other than the switch's | `CAP_CHOWN` |
//! | `vhost-user` socket in another user's directory (KubeVirt's `0770`) | the switch in that directory's group (never `CAP_DAC_OVERRIDE`, which it drops) |
//! | `af_packet` (qdisc bypass, fanout, vnet header included) | `CAP_NET_RAW` |
//! | `af_xdp` | `CAP_NET_RAW`, `CAP_NET_ADMIN` (XSKMAP, attach), `CAP_BPF`, `CAP_IPC_LOCK` (or an unlimited `RLIMIT_MEMLOCK`) |
//! | `tap` | `CAP_NET_ADMIN` |
//! | `tap` with `netns` (a pod's TAP) | `CAP_NET_ADMIN`, `CAP_SYS_ADMIN` (`setns`) |
//!
//! `CAP_DAC_OVERRIDE` is never kept: with it, every file operation the
//! switch makes in a pod's directory would pass the permission checks that
//! keep a tenant's links from reaching other users' files. A socket
//! directory of another user is reached through its group instead: the
//! directory is made with a group the switch is in (KubeVirt's and the
//! device plugin's `0770` directories of uid 107, group 107), and the
//! operator adds the switch to it (systemd `SupplementaryGroups=`,
//! Kubernetes `securityContext.supplementalGroups`).

use std::fmt;
use std::fs;
use std::sync::OnceLock;

use vhost_net_backend::sys::caps::{self, Cap, CapSet, Caps};
use vhu_api::{PortKind, PortSpec};

use crate::control::Refusal;

/// A class of port, as `port_kinds` names it: a kind, with a pod's TAP
/// apart (it alone needs `CAP_SYS_ADMIN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortClass {
    /// `vhost-user`.
    VhostUser,
    /// `af_packet`.
    AfPacket,
    /// `af_xdp`.
    AfXdp,
    /// `tap` without `netns`.
    Tap,
    /// `pod-tap`: `tap` with `netns`.
    PodTap,
}

impl PortClass {
    /// Every class.
    pub const ALL: [PortClass; 5] = [
        PortClass::VhostUser,
        PortClass::AfPacket,
        PortClass::AfXdp,
        PortClass::Tap,
        PortClass::PodTap,
    ];

    /// Its name in `port_kinds`.
    pub fn name(self) -> &'static str {
        match self {
            PortClass::VhostUser => "vhost-user",
            PortClass::AfPacket => "af_packet",
            PortClass::AfXdp => "af_xdp",
            PortClass::Tap => "tap",
            PortClass::PodTap => "pod-tap",
        }
    }

    /// The class named `s`.
    pub fn parse(s: &str) -> Option<PortClass> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// A port's class.
    pub fn of(spec: &PortSpec) -> PortClass {
        match spec.kind {
            PortKind::VhostUser => PortClass::VhostUser,
            PortKind::AfPacket => PortClass::AfPacket,
            PortKind::AfXdp => PortClass::AfXdp,
            PortKind::Tap if spec.netns.is_some() => PortClass::PodTap,
            PortKind::Tap => PortClass::Tap,
        }
    }

    /// Every capability a port of the class may use: what the switch keeps
    /// for it.
    pub fn may_use(self) -> CapSet {
        CapSet::of(match self {
            PortClass::VhostUser => &[Cap::CHOWN],
            PortClass::AfPacket => &[Cap::NET_RAW],
            PortClass::AfXdp => &[Cap::NET_RAW, Cap::NET_ADMIN, Cap::BPF, Cap::IPC_LOCK],
            PortClass::Tap => &[Cap::NET_ADMIN],
            PortClass::PodTap => &[Cap::NET_ADMIN, Cap::SYS_ADMIN],
        })
    }
}

impl fmt::Display for PortClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the process is, for [`required`]: its ids and limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id and supplementary groups.
    pub gids: Vec<u32>,
    /// `RLIMIT_MEMLOCK` is unlimited.
    pub memlock_unlimited: bool,
}

impl Identity {
    /// The calling process's (from `/proc/self/status` and
    /// `/proc/self/limits`; what cannot be read is root's ids and a
    /// limited memlock).
    pub fn current() -> Identity {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let ids = |k: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|r| {
                    r.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let uid = ids("Uid:").get(1).copied().unwrap_or(0);
        let mut gids = ids("Gid:").get(1).copied().into_iter().collect::<Vec<_>>();
        gids.extend(ids("Groups:"));
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let memlock_unlimited = limits
            .lines()
            .find(|l| l.starts_with("Max locked memory"))
            .is_some_and(|l| l.split_whitespace().nth(3) == Some("unlimited"));
        Identity {
            uid,
            gids,
            memlock_unlimited,
        }
    }
}

/// The capabilities `spec` needs, each with why.
pub fn required(spec: &PortSpec, me: &Identity) -> Vec<(Cap, &'static str)> {
    let mut v = Vec::new();
    match PortClass::of(spec) {
        PortClass::VhostUser => {
            let other = |field: &Option<String>, file: &str, mine: &dyn Fn(u32) -> bool| {
                field
                    .as_deref()
                    .is_some_and(|n| lookup_id(file, n).map_or(true, |id| !mine(id)))
            };
            if other(&spec.owner, "/etc/passwd", &|id| id == me.uid) {
                v.push((Cap::CHOWN, "to give its socket another owner"));
            } else if other(&spec.group, "/etc/group", &|id| me.gids.contains(&id)) {
                v.push((
                    Cap::CHOWN,
                    "to give its socket a group the switch is not in",
                ));
            }
        }
        PortClass::AfPacket => v.push((Cap::NET_RAW, "to open packet sockets")),
        PortClass::AfXdp => {
            v.push((Cap::NET_RAW, "to open AF_XDP sockets"));
            v.push((Cap::NET_ADMIN, "to create the XSKMAP and attach XDP"));
            v.push((Cap::BPF, "to load the XDP program"));
            if !me.memlock_unlimited {
                v.push((
                    Cap::IPC_LOCK,
                    "to register the UMEM (or run with an unlimited RLIMIT_MEMLOCK)",
                ));
            }
        }
        PortClass::Tap => v.push((Cap::NET_ADMIN, "to create or attach the TAP")),
        PortClass::PodTap => {
            v.push((Cap::NET_ADMIN, "to create or attach the TAP"));
            v.push((Cap::SYS_ADMIN, "to enter the pod's network namespace"));
        }
    }
    v
}

/// What the switch may serve: decided once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The classes it serves (`port_kinds`, or all).
    pub classes: Vec<PortClass>,
    /// Whether `port_kinds` named them.
    pub explicit: bool,
    /// The capabilities it kept (effective after [`apply`]).
    pub held: CapSet,
    /// Its ids and limits.
    pub me: Identity,
}

impl Policy {
    /// The policy for `classes` (`None`: all) given what the process holds
    /// (`permitted`): it keeps `permitted` ∩ what the classes may use.
    pub fn new(classes: Option<&[PortClass]>, permitted: CapSet, me: Identity) -> Policy {
        let explicit = classes.is_some();
        let classes = classes.map_or_else(|| PortClass::ALL.to_vec(), <[_]>::to_vec);
        let may = classes
            .iter()
            .fold(CapSet::EMPTY, |s, c| s.union(c.may_use()));
        Policy {
            classes,
            explicit,
            held: permitted.intersection(may),
            me,
        }
    }

    /// Why `spec` cannot be served, if it cannot: its class is not in
    /// `port_kinds`, or it needs capabilities the switch does not hold.
    pub fn refusal(&self, spec: &PortSpec) -> Option<String> {
        let who = format!("port {:?}", spec.name);
        let class = PortClass::of(spec);
        if !self.classes.contains(&class) {
            let list: Vec<_> = self.classes.iter().map(|c| c.name()).collect();
            return Some(format!(
                "{who}: this switch serves only port kinds [{}] (port_kinds / --port-kinds); \
                 add {class} there and restart it with the capabilities {class} needs ({})",
                list.join(", "),
                class.may_use()
            ));
        }
        let missing: Vec<_> = required(spec, &self.me)
            .into_iter()
            .filter(|(c, _)| !self.held.contains(*c))
            .collect();
        if missing.is_empty() {
            return None;
        }
        let caps: Vec<String> = missing.iter().map(|(c, _)| c.to_string()).collect();
        let why: Vec<String> = missing.iter().map(|(c, w)| format!("{c} {w}")).collect();
        let bare: Vec<String> = caps
            .iter()
            .map(|c| c.trim_start_matches("CAP_").to_owned())
            .collect();
        let setpriv: Vec<String> = bare
            .iter()
            .map(|c| format!("+{}", c.to_ascii_lowercase()))
            .collect();
        Some(format!(
            "{who}: a {class} port needs {}, and the switch does not hold {} (it holds {}); \
             grant it: systemd AmbientCapabilities={} (and in CapabilityBoundingSet=), \
             Kubernetes securityContext.capabilities.add [{}], \
             or setpriv --inh-caps={sp} --ambient-caps={sp}",
            why.join(", "),
            caps.join(", "),
            self.held,
            caps.join(" "),
            bare.join(", "),
            sp = setpriv.join(","),
        ))
    }

    /// The classes it cannot serve for want of capabilities, with what
    /// they lack (a plain port of each class).
    pub fn unservable(&self) -> Vec<(PortClass, CapSet)> {
        self.classes
            .iter()
            .filter_map(|&c| {
                let spec = match c {
                    PortClass::VhostUser => PortSpec::new("x", PortKind::VhostUser),
                    PortClass::AfPacket => PortSpec::new("x", PortKind::AfPacket),
                    PortClass::AfXdp => PortSpec::new("x", PortKind::AfXdp),
                    PortClass::Tap => PortSpec::new("x", PortKind::Tap),
                    PortClass::PodTap => {
                        let mut s = PortSpec::new("x", PortKind::Tap);
                        s.netns = Some("/x".into());
                        s
                    }
                };
                let need = required(&spec, &self.me)
                    .iter()
                    .fold(CapSet::EMPTY, |s, (c, _)| s.union(CapSet::of(&[*c])));
                let lack = need.minus(self.held);
                (!lack.is_empty()).then_some((c, lack))
            })
            .collect()
    }
}

static POLICY: OnceLock<Policy> = OnceLock::new();

/// Why [`apply`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The kernel refused a step of dropping them.
    #[error("cannot drop capabilities: {0}")]
    Restrict(std::io::Error),
    /// [`apply`] was called before.
    #[error("the capability policy is set twice")]
    SetTwice,
}

/// Why [`lookup_id`] found no id.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The file could not be read.
    #[error("cannot read {file}: {error}")]
    Read {
        /// `/etc/passwd` or `/etc/group`.
        file: String,
        /// What reading it said.
        error: std::io::Error,
    },
    /// The name has no entry in the file.
    #[error("{name:?} is not in {file}")]
    Unknown {
        /// The user or group name.
        name: String,
        /// `/etc/passwd` or `/etc/group`.
        file: String,
    },
}

/// Keeps only what `policy` holds (every other capability is dropped from
/// the five sets; no-new-privs) and makes it the process's policy for
/// [`check`]. Call it once, before any other thread starts.
///
/// # Errors
/// The kernel refused a step.
pub fn apply(policy: Policy) -> Result<Caps, ApplyError> {
    let after = caps::restrict(policy.held).map_err(ApplyError::Restrict)?;
    let policy = Policy {
        held: after.effective,
        ..policy
    };
    POLICY.set(policy).map_err(|_| ApplyError::SetTwice)?;
    Ok(after)
}

/// The policy [`apply`] set, if any.
pub fn policy() -> Option<&'static Policy> {
    POLICY.get()
}

/// Refuses (422) a port the switch cannot serve; passes when no policy is
/// set (the switch as a library, in unit tests).
///
/// # Errors
/// 422 naming the capability and how to grant it.
pub fn check(spec: &PortSpec) -> Result<(), Refusal> {
    match POLICY.get().and_then(|p| p.refusal(spec)) {
        Some(m) => Err(Refusal::invalid(m)),
        None => Ok(()),
    }
}

/// A user or group id: numeric, or the name's entry in `file` (`/etc/passwd`
/// or `/etc/group`: `name:x:id:...`).
pub fn lookup_id(file: &str, name: &str) -> Result<u32, LookupError> {
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    let text = fs::read_to_string(file).map_err(|error| LookupError::Read {
        file: file.to_owned(),
        error,
    })?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let n = f.next()?;
            let id = f.nth(1)?.parse::<u32>().ok()?;
            (n == name).then_some(id)
        })
        .next()
        .ok_or_else(|| LookupError::Unknown {
            name: name.to_owned(),
            file: file.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_from_names_and_numbers() {
        assert_eq!(lookup_id("/etc/passwd", "root").unwrap(), 0);
        assert_eq!(lookup_id("/etc/group", "root").unwrap(), 0);
        assert_eq!(lookup_id("/etc/passwd", "1234").unwrap(), 1234);
        let e = lookup_id("/etc/passwd", "no-such-user-vhu")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not in /etc/passwd"), "{e}");
    }

    fn me() -> Identity {
        Identity {
            uid: 65534,
            gids: vec![65534],
            memlock_unlimited: false,
        }
    }

    #[test]
    fn names() {
        for c in PortClass::ALL {
            assert_eq!(PortClass::parse(c.name()), Some(c));
        }
        assert_eq!(PortClass::parse("af-packet"), None);
        let mut s = PortSpec::new("t", PortKind::Tap);
        assert_eq!(PortClass::of(&s), PortClass::Tap);
        s.netns = Some("/var/run/netns/p".into());
        assert_eq!(PortClass::of(&s), PortClass::PodTap);
    }

    #[test]
    fn what_each_port_needs() {
        let caps = |s: &PortSpec, me: &Identity| -> Vec<Cap> {
            required(s, me).into_iter().map(|(c, _)| c).collect()
        };
        let mut v = PortSpec::new("v", PortKind::VhostUser);
        assert!(caps(&v, &me()).is_empty());
        v.group = Some("65534".into());
        assert!(caps(&v, &me()).is_empty(), "its own group");
        v.owner = Some("root".into());
        assert_eq!(caps(&v, &me()), [Cap::CHOWN]);
        let mut x = PortSpec::new("x", PortKind::AfXdp);
        assert_eq!(
            caps(&x, &me()),
            [Cap::NET_RAW, Cap::NET_ADMIN, Cap::BPF, Cap::IPC_LOCK]
        );
        let unlimited = Identity {
            memlock_unlimited: true,
            ..me()
        };
        assert_eq!(caps(&x, &unlimited).len(), 3);
        x.kind = PortKind::AfPacket;
        assert_eq!(caps(&x, &me()), [Cap::NET_RAW]);
        x.kind = PortKind::Tap;
        assert_eq!(caps(&x, &me()), [Cap::NET_ADMIN]);
        x.netns = Some("/n".into());
        assert_eq!(caps(&x, &me()), [Cap::NET_ADMIN, Cap::SYS_ADMIN]);
    }

    #[test]
    fn the_policy_keeps_what_kinds_may_use_and_refuses_what_it_lacks() {
        let all = CapSet(0x1ff_ffff_ffff);
        let p = Policy::new(None, all, me());
        assert!(!p.held.contains(Cap::SYS_PTRACE) && !p.held.contains(Cap::SETUID));
        assert!(p.held.contains(Cap::SYS_ADMIN), "pod TAPs");
        assert!(p.unservable().is_empty());
        let p = Policy::new(
            Some(&[PortClass::VhostUser, PortClass::AfPacket]),
            all,
            me(),
        );
        assert_eq!(p.held, CapSet::of(&[Cap::CHOWN, Cap::NET_RAW]));
        let p_all = Policy::new(None, all, me());
        assert!(
            !p_all.held.contains(Cap::DAC_OVERRIDE),
            "never CAP_DAC_OVERRIDE: {}",
            p_all.held
        );
        let tap = PortSpec::new("t", PortKind::Tap);
        let m = p.refusal(&tap).unwrap();
        assert!(m.contains("only port kinds [vhost-user, af_packet]"), "{m}");
        let p = Policy::new(None, CapSet::EMPTY, me());
        let mut up = PortSpec::new("up", PortKind::AfPacket);
        up.interface = Some("eth0".into());
        let m = p.refusal(&up).unwrap();
        for want in [
            "port \"up\": a af_packet port needs CAP_NET_RAW",
            "holds none",
            "AmbientCapabilities=CAP_NET_RAW",
            "add [NET_RAW]",
            "--ambient-caps=+net_raw",
        ] {
            assert!(m.contains(want), "{want:?} not in {m}");
        }
        assert_eq!(p.refusal(&PortSpec::new("v", PortKind::VhostUser)), None);
        let lack = p.unservable();
        assert_eq!(lack.len(), 4, "{lack:?}");
        assert_eq!(lack[0], (PortClass::AfPacket, CapSet::of(&[Cap::NET_RAW])));
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch's configuration: embedded defaults, then an optional TOML file,
//! then command-line flags. Loading has no side effects; every error is
//! collected (with its place in the file) before any is reported.
//!
//! ```toml
//! [switch]
//! control_socket = "/run/vhu/vhu.sock"
//! socket_dir = "/run/vhu/sockets"
//! state_dir = "/var/lib/vhu"
//! pmd_cpus = [1]          # one PMD thread per CPU listed; or `pmds = 2` unpinned
//! poll = "adaptive"       # busy | adaptive | interrupt
//! log_format = "plain"    # plain | json
//! fdb_aging_secs = 300
//! fdb_max_entries = 8192
//! fdb_max_per_port = 256  # default: fdb_max_entries / 32 (vhost-user and tap ports)
//! flood_rate = 0          # frames/s each vhost-user or tap port may flood; 0: unlimited
//! flood_burst = 64
//! max_guest_memory_mib = 524288  # per vhost-user port (512 GiB, the default)
//! port_kinds = ["vhost-user", "af_packet"]  # default: every kind (docs/switch.md, "Privileges")
//!
//! [[port]]
//! name = "vm1"
//! kind = "vhost-user"
//! role = "client"
//! socket = "/var/run/vm1.sock"
//! vlan = 10
//! ```
//!
//! A `[[port]]` table takes the fields of the API's port object
//! ([`vhu_api::port`]).

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use vhu_api::{PortKind, PortSpec, Role};

use crate::endpoint::socket_path;
use crate::fdb::{FdbConfig, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_PER_PORT};
use crate::privilege::PortClass;

/// Default control socket.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/vhu/vhu.sock";
/// Default directory of the vhost-user sockets the switch creates.
pub const DEFAULT_SOCKET_DIR: &str = "/run/vhu/sockets";
/// Default directory of the persisted state (ports created through the
/// API).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/vhu";
/// Largest `max_guest_memory_mib`: 128 TiB, the user address space of a
/// 47-bit x86-64 process.
pub const MAX_GUEST_MEMORY_MIB: u64 = 128 << 20;
/// Most PMD threads.
pub const MAX_PMDS: usize = 64;

/// How PMD threads wait for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin all the time (one full core per PMD).
    Busy,
    /// Spin while there is traffic, sleep on kicks after a short idle time.
    #[default]
    Adaptive,
    /// Sleep whenever idle.
    Interrupt,
}

impl PollMode {
    /// Parses a flag value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "busy" => Some(Self::Busy),
            "adaptive" => Some(Self::Adaptive),
            "interrupt" => Some(Self::Interrupt),
            _ => None,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Plain,
    /// One JSON object per event.
    Json,
}

impl LogFormat {
    /// Parses a flag value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "plain" => Some(Self::Plain),
            "json" => Some(Self::Json),
            _ => None,
        }
    }
}

/// The `[switch]` table as written (every field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchTable {
    control_socket: Option<PathBuf>,
    socket_dir: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    pmds: Option<Spanned<u32>>,
    pmd_cpus: Option<Spanned<Vec<u32>>>,
    poll: Option<PollMode>,
    log_format: Option<LogFormat>,
    fdb_aging_secs: Option<Spanned<u64>>,
    fdb_max_entries: Option<Spanned<u64>>,
    fdb_max_per_port: Option<Spanned<u64>>,
    flood_rate: Option<Spanned<u64>>,
    flood_burst: Option<Spanned<u64>>,
    port_kinds: Option<Spanned<Vec<String>>>,
    max_guest_memory_mib: Option<Spanned<u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    switch: Option<SwitchTable>,
    #[serde(default)]
    port: Vec<Spanned<PortSpec>>,
}

/// Command-line overrides (each `None` when the flag is absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--control-socket`.
    pub control_socket: Option<PathBuf>,
    /// `--socket-dir`.
    pub socket_dir: Option<PathBuf>,
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--pmd-cpus 0,1`.
    pub pmd_cpus: Option<Vec<u32>>,
    /// `--poll`.
    pub poll: Option<PollMode>,
    /// `--log-format`.
    pub log_format: Option<LogFormat>,
    /// `--port-kinds vhost-user,af_packet`.
    pub port_kinds: Option<Vec<String>>,
    /// `--max-guest-memory-mib`.
    pub max_guest_memory_mib: Option<u64>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The control API's socket.
    pub control_socket: PathBuf,
    /// Where server-role vhost-user sockets go by default.
    pub socket_dir: PathBuf,
    /// Where ports created through the API are persisted.
    pub state_dir: PathBuf,
    /// PMD threads, each pinned to its CPU if `Some`.
    pub pmds: Vec<Option<u32>>,
    /// Polling mode of the PMD threads.
    pub poll: PollMode,
    /// Log format.
    pub log_format: LogFormat,
    /// FDB limits and aging.
    pub fdb: FdbConfig,
    /// Frames per second a vhost-user or tap port without a `flood_rate`
    /// may flood (0: unlimited).
    pub flood_rate: u32,
    /// Frames a flood may bring at once beyond the rate, for a port
    /// without a `flood_burst`.
    pub flood_burst: u32,
    /// Ports from the file, in order.
    pub ports: Vec<PortSpec>,
    /// Each port's place in the file (`FILE:LINE:COL`), in the same order.
    pub port_places: Vec<String>,
    /// The port kinds the switch may serve (`None`: every kind); it keeps
    /// only the capabilities these may use.
    pub port_kinds: Option<Vec<PortClass>>,
    /// Most guest memory a vhost-user port maps for one frontend, in
    /// bytes (`max_guest_memory_mib`; default
    /// [`vhost_net_backend::DEFAULT_MAX_GUEST_MEMORY`], 512 GiB).
    pub max_guest_memory: u64,
}

impl Default for Config {
    /// The embedded defaults: no file, no flags.
    fn default() -> Self {
        Self {
            control_socket: DEFAULT_CONTROL_SOCKET.into(),
            socket_dir: DEFAULT_SOCKET_DIR.into(),
            state_dir: DEFAULT_STATE_DIR.into(),
            pmds: vec![None],
            poll: PollMode::Adaptive,
            log_format: LogFormat::Plain,
            fdb: FdbConfig::default(),
            flood_rate: crate::pmd::DEFAULT_FLOOD_RATE,
            flood_burst: crate::pmd::DEFAULT_FLOOD_BURST,
            ports: Vec::new(),
            port_places: Vec::new(),
            port_kinds: None,
            max_guest_memory: vhost_net_backend::DEFAULT_MAX_GUEST_MEMORY,
        }
    }
}

/// Every problem found in a configuration, each with its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "{n} configuration error{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// `line:column` (1-based) of a byte offset.
fn place(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{line}:{col}")
}

impl Config {
    /// Loads `file` (if any) over the defaults, applies `flags`, validates.
    ///
    /// # Errors
    /// Every problem, each prefixed with `FILE:LINE:COL` where it has one.
    pub fn load(file: Option<&Path>, flags: &Overrides) -> Result<Self, ConfigErrors> {
        match file {
            None => Self::from_toml("", "<defaults>", flags),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    ConfigErrors(vec![format!("{}: cannot read: {e}", p.display())])
                })?;
                Self::from_toml(&text, &p.display().to_string(), flags)
            }
        }
    }

    /// Parses and validates a configuration text; `origin` names it in
    /// errors.
    ///
    /// # Errors
    /// Every problem, each with its place.
    pub fn from_toml(text: &str, origin: &str, flags: &Overrides) -> Result<Self, ConfigErrors> {
        let file: File = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| format!("{origin}:{}", place(text, s.start)))
                .unwrap_or_else(|| origin.to_owned());
            ConfigErrors(vec![format!("{at}: {}", e.message())])
        })?;
        let mut errs = Vec::new();
        let at = |span: Range<usize>| format!("{origin}:{}", place(text, span.start));
        let mut cfg = Config::default();
        let sw = file.switch.unwrap_or_default();
        if let Some(p) = sw.control_socket {
            cfg.control_socket = p;
        }
        if let Some(p) = sw.socket_dir {
            cfg.socket_dir = p;
        }
        if let Some(p) = sw.state_dir {
            cfg.state_dir = p;
        }
        if let Some(p) = sw.poll {
            cfg.poll = p;
        }
        if let Some(f) = sw.log_format {
            cfg.log_format = f;
        }
        match (&sw.pmds, &sw.pmd_cpus) {
            (Some(n), Some(_)) => errs.push(format!(
                "{}: give either `pmds` or `pmd_cpus` (one PMD per listed CPU), not both",
                at(n.span())
            )),
            (Some(n), None) => {
                let v = *n.get_ref() as usize;
                if v == 0 || v > MAX_PMDS {
                    errs.push(format!(
                        "{}: pmds = {v} is out of range 1-{MAX_PMDS}",
                        at(n.span())
                    ));
                } else {
                    cfg.pmds = vec![None; v];
                }
            }
            (None, Some(c)) => match check_cpus(c.get_ref()) {
                Ok(()) => cfg.pmds = c.get_ref().iter().map(|&c| Some(c)).collect(),
                Err(m) => errs.push(format!("{}: pmd_cpus: {m}", at(c.span()))),
            },
            (None, None) => {}
        }
        let aging = sw.fdb_aging_secs.as_ref().map(|s| (*s.get_ref(), s.span()));
        if let Some((v, span)) = aging {
            if v == 0 || v > 1_000_000 {
                errs.push(format!(
                    "{}: fdb_aging_secs = {v} is out of range 1-1000000",
                    at(span)
                ));
            } else {
                cfg.fdb.aging = Duration::from_secs(v);
            }
        }
        for (field, value, default, target) in [
            (
                "fdb_max_entries",
                &sw.fdb_max_entries,
                DEFAULT_MAX_ENTRIES,
                &mut cfg.fdb.max_entries,
            ),
            (
                "fdb_max_per_port",
                &sw.fdb_max_per_port,
                DEFAULT_MAX_PER_PORT,
                &mut cfg.fdb.max_per_port,
            ),
        ] {
            *target = default;
            if let Some(v) = value {
                let n = *v.get_ref();
                if n == 0 || n > 10_000_000 {
                    errs.push(format!(
                        "{}: {field} = {n} is out of range 1-10000000",
                        at(v.span())
                    ));
                } else {
                    *target = n as usize;
                }
            }
        }
        if sw.fdb_max_per_port.is_none() {
            // Derived from the table's size: it takes PORT_SHARES ports at
            // their quota to fill it.
            cfg.fdb.max_per_port = (cfg.fdb.max_entries / crate::fdb::PORT_SHARES).max(1);
        }
        for (field, value, max, target) in [
            (
                "flood_rate",
                &sw.flood_rate,
                u64::from(vhu_api::port::MAX_FLOOD_RATE),
                &mut cfg.flood_rate,
            ),
            (
                "flood_burst",
                &sw.flood_burst,
                u64::from(vhu_api::port::MAX_FLOOD_BURST),
                &mut cfg.flood_burst,
            ),
        ] {
            if let Some(v) = value {
                let n = *v.get_ref();
                let min = u64::from(field == "flood_burst");
                match u32::try_from(n) {
                    Ok(n32) if (min..=max).contains(&n) => *target = n32,
                    _ => errs.push(format!(
                        "{}: {field} = {n} is out of range {min}-{max}",
                        at(v.span())
                    )),
                }
            }
        }
        if let Some(k) = &sw.port_kinds {
            match check_kinds(k.get_ref()) {
                Ok(v) => cfg.port_kinds = Some(v),
                Err(m) => errs.push(format!("{}: port_kinds: {m}", at(k.span()))),
            }
        }
        let mib = sw.max_guest_memory_mib.as_ref();
        let mib = mib.map(|v| (*v.get_ref(), at(v.span())));
        let flag = flags
            .max_guest_memory_mib
            .map(|v| (v, "--max-guest-memory-mib".to_owned()));
        // The flag wins over the file.
        for (v, place) in [mib, flag].into_iter().flatten() {
            if v == 0 || v > MAX_GUEST_MEMORY_MIB {
                errs.push(format!(
                    "{place}: max_guest_memory_mib = {v} is out of range 1-{MAX_GUEST_MEMORY_MIB}"
                ));
            } else {
                cfg.max_guest_memory = v << 20;
            }
        }
        // Flags win over the file.
        if let Some(k) = &flags.port_kinds {
            match check_kinds(k) {
                Ok(v) => cfg.port_kinds = Some(v),
                Err(m) => errs.push(format!("--port-kinds: {m}")),
            }
        }
        if let Some(p) = &flags.control_socket {
            cfg.control_socket = p.clone();
        }
        if let Some(p) = &flags.socket_dir {
            cfg.socket_dir = p.clone();
        }
        if let Some(p) = &flags.state_dir {
            cfg.state_dir = p.clone();
        }
        if let Some(c) = &flags.pmd_cpus {
            match check_cpus(c) {
                Ok(()) => cfg.pmds = c.iter().map(|&c| Some(c)).collect(),
                Err(m) => errs.push(format!("--pmd-cpus: {m}")),
            }
        }
        if let Some(p) = flags.poll {
            cfg.poll = p;
        }
        if let Some(f) = flags.log_format {
            cfg.log_format = f;
        }
        for (name, p) in [
            ("control_socket", &cfg.control_socket),
            ("socket_dir", &cfg.socket_dir),
            ("state_dir", &cfg.state_dir),
        ] {
            if !p.is_absolute() {
                errs.push(format!(
                    "{origin}: {name} {:?} must be an absolute path",
                    p.display()
                ));
            }
        }
        cfg.ports = check_ports(
            &file.port,
            cfg.pmds.len(),
            &cfg.socket_dir,
            &mut |span, m| errs.push(format!("{}: {m}", at(span))),
        );
        cfg.port_places = file.port.iter().map(|p| at(p.span())).collect();
        if errs.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigErrors(errs))
        }
    }
}

fn check_kinds(k: &[String]) -> Result<Vec<PortClass>, String> {
    let mut out = Vec::new();
    for s in k {
        let c = PortClass::parse(s).ok_or_else(|| {
            let names: Vec<_> = PortClass::ALL.iter().map(|c| c.name()).collect();
            format!("{s:?} is not a port kind ({})", names.join(", "))
        })?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

fn check_cpus(c: &[u32]) -> Result<(), String> {
    if c.is_empty() || c.len() > MAX_PMDS {
        return Err(format!("list 1-{MAX_PMDS} CPUs"));
    }
    for (i, x) in c.iter().enumerate() {
        if c[..i].contains(x) {
            return Err(format!("CPU {x} is listed twice"));
        }
    }
    Ok(())
}

fn check_ports(
    ports: &[Spanned<PortSpec>],
    pmds: usize,
    socket_dir: &Path,
    err: &mut dyn FnMut(Range<usize>, String),
) -> Vec<PortSpec> {
    let mut out: Vec<PortSpec> = Vec::with_capacity(ports.len());
    for sp in ports {
        let p = sp.get_ref();
        let who = format!("port {:?}", p.name);
        if let Err(es) = p.validate() {
            for e in es {
                err(sp.span(), format!("{who}: {e}"));
            }
        }
        if out.iter().any(|o| o.name == p.name) {
            err(
                sp.span(),
                format!("{who}: the name is used by an earlier port"),
            );
        }
        if let Some(s) = socket_path(p, socket_dir) {
            if out
                .iter()
                .any(|o| socket_path(o, socket_dir).as_deref() == Some(s.as_path()))
            {
                err(
                    sp.span(),
                    format!("{who}: socket {} is used by an earlier port", s.display()),
                );
            }
        }
        if p.kind != PortKind::VhostUser || p.role() == Role::Client {
            // Uplinks and client sockets: several ports on one interface
            // (or one VMM socket) would fight over it.
            if let Some(i) = &p.interface {
                if out.iter().any(|o| o.interface.as_ref() == Some(i)) {
                    err(
                        sp.span(),
                        format!("{who}: interface {i:?} is used by an earlier port"),
                    );
                }
            }
        }
        if let Some(n) = p.pmd {
            if n as usize >= pmds {
                err(
                    sp.span(),
                    format!(
                        "{who}: pmd: {n} is not a PMD thread (there {} {pmds}: 0-{})",
                        if pmds == 1 { "is" } else { "are" },
                        pmds - 1
                    ),
                );
            }
        }
        out.push(p.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigErrors> {
        Config::from_toml(text, "vhu.toml", &Overrides::default())
    }

    #[test]
    fn defaults_without_a_file() {
        let c = Config::load(None, &Overrides::default()).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.control_socket, Path::new("/run/vhu/vhu.sock"));
        assert_eq!(c.pmds, vec![None]);
        assert_eq!(c.poll, PollMode::Adaptive);
    }

    #[test]
    fn a_full_file_and_flags_over_it() {
        let text = r#"
[switch]
socket_dir = "/tmp/s"
pmd_cpus = [1, 0]
poll = "busy"
fdb_aging_secs = 5
fdb_max_entries = 100

[[port]]
name = "vm1"
kind = "vhost-user"
vlan = 10

[[port]]
name = "up"
kind = "af_packet"
interface = "eth0"
vlan = { trunk = [10, 20], native = 10 }
pmd = 1
"#;
        let c = load(text).unwrap();
        assert_eq!(c.socket_dir, Path::new("/tmp/s"));
        assert_eq!(c.pmds, vec![Some(1), Some(0)]);
        assert_eq!(c.poll, PollMode::Busy);
        assert_eq!(c.fdb.aging, Duration::from_secs(5));
        assert_eq!(c.fdb.max_entries, 100);
        assert_eq!(c.ports.len(), 2);
        assert_eq!(
            socket_path(&c.ports[0], &c.socket_dir).unwrap(),
            Path::new("/tmp/s/vm1.sock")
        );
        let flags = Overrides {
            poll: Some(PollMode::Interrupt),
            socket_dir: Some("/x".into()),
            pmd_cpus: Some(vec![3]),
            ..Overrides::default()
        };
        let c = Config::from_toml(&text.replace("pmd = 1", ""), "f", &flags).unwrap();
        assert_eq!(c.poll, PollMode::Interrupt);
        assert_eq!(c.socket_dir, Path::new("/x"));
        assert_eq!(c.pmds, vec![Some(3)]);
    }

    #[test]
    fn every_error_is_reported_with_its_place() {
        let text = r#"[switch]
pmds = 0
fdb_aging_secs = 0
state_dir = "relative"

[[port]]
name = "a"
kind = "vhost-user"
vlan = 5000

[[port]]
name = "a"
kind = "af_xdp"
pmd = 3
"#;
        let e = load(text).unwrap_err().0;
        let want = [
            "vhu.toml:2:8: pmds = 0 is out of range",
            "vhu.toml:3:18: fdb_aging_secs = 0",
            "state_dir \"relative\" must be an absolute path",
            "vhu.toml:6:1: port \"a\": vlan: VLAN id 5000 is out of range 1-4094",
            "vhu.toml:11:1: port \"a\": interface: a af_xdp port needs",
            "vhu.toml:11:1: port \"a\": the name is used by an earlier port",
            "vhu.toml:11:1: port \"a\": pmd: 3 is not a PMD thread (there is 1: 0-0)",
        ];
        for w in want {
            assert!(e.iter().any(|x| x.contains(w)), "want {w:?} in {e:#?}");
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn syntax_and_type_errors_say_where() {
        let e = load("[switch]\npoll = \"fast\"\n").unwrap_err().0;
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("vhu.toml:2:8: "), "{e:?}");
        let e = load("[[port]]\nname = \"a\"\nkind = \"tap\"\ninterface = \"t\"\ncolour = 1\n")
            .unwrap_err()
            .0;
        assert!(e[0].contains("colour"), "{e:?}");
        let e = load("[switch\n").unwrap_err().0;
        assert!(e[0].starts_with("vhu.toml:1:"), "{e:?}");
        let e = load("[bogus]\n").unwrap_err().0;
        assert!(e[0].contains("bogus"), "{e:?}");
    }

    #[test]
    fn duplicate_sockets_and_interfaces() {
        let text = r#"
[[port]]
name = "a"
kind = "vhost-user"
socket = "x.sock"
[[port]]
name = "b"
kind = "vhost-user"
socket = "/run/vhu/sockets/x.sock"
[[port]]
name = "c"
kind = "af_packet"
interface = "eth0"
[[port]]
name = "d"
kind = "af_xdp"
interface = "eth0"
"#;
        let e = load(text).unwrap_err().0;
        assert_eq!(e.len(), 2, "{e:#?}");
        assert!(e[0].contains("socket /run/vhu/sockets/x.sock is used"));
        assert!(e[1].contains("interface \"eth0\" is used"));
    }

    #[test]
    fn port_kinds_and_places() {
        let text = "[switch]\nport_kinds = [\"vhost-user\", \"af_packet\"]\n\n[[port]]\nname = \"a\"\nkind = \"vhost-user\"\n";
        let c = load(text).unwrap();
        assert_eq!(
            c.port_kinds,
            Some(vec![PortClass::VhostUser, PortClass::AfPacket])
        );
        assert_eq!(c.port_places, ["vhu.toml:4:1"]);
        assert_eq!(load("").unwrap().port_kinds, None);
        let e = load("[switch]\nport_kinds = [\"nic\"]\n").unwrap_err().0;
        assert!(e[0].starts_with("vhu.toml:2:14: port_kinds: \"nic\" is not a port kind (vhost-user, af_packet, af_xdp, tap, pod-tap)"), "{e:?}");
        let flags = Overrides {
            port_kinds: Some(vec!["tap".into(), "pod-tap".into()]),
            ..Overrides::default()
        };
        let c = Config::from_toml(text, "f", &flags).unwrap();
        assert_eq!(c.port_kinds, Some(vec![PortClass::Tap, PortClass::PodTap]));
    }

    #[test]
    fn max_guest_memory_from_the_file_and_the_flag() {
        let c = load("").unwrap();
        assert_eq!(c.max_guest_memory, 512 << 30);
        let c = load("[switch]\nmax_guest_memory_mib = 64\n").unwrap();
        assert_eq!(c.max_guest_memory, 64 << 20);
        let flags = Overrides {
            max_guest_memory_mib: Some(128),
            ..Overrides::default()
        };
        let c = Config::from_toml("[switch]\nmax_guest_memory_mib = 64\n", "f", &flags).unwrap();
        assert_eq!(c.max_guest_memory, 128 << 20, "the flag wins");
        let e = load("[switch]\nmax_guest_memory_mib = 0\n").unwrap_err().0;
        assert!(
            e[0].contains("max_guest_memory_mib = 0 is out of range"),
            "{e:?}"
        );
    }

    #[test]
    fn pmds_and_cpus_conflict() {
        let e = load("[switch]\npmds = 2\npmd_cpus = [0]\n").unwrap_err().0;
        assert!(e[0].contains("either `pmds` or `pmd_cpus`"), "{e:?}");
        let e = load("[switch]\npmd_cpus = [0, 0]\n").unwrap_err().0;
        assert!(e[0].contains("CPU 0 is listed twice"), "{e:?}");
        assert_eq!(load("[switch]\npmds = 3\n").unwrap().pmds, vec![None; 3]);
    }
}

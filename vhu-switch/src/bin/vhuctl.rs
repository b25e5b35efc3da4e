// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhuctl`: the command line over `vhu-switch`'s control API.
//!
//! ```text
//! vhuctl [--socket PATH] [--json] port add NAME --kind vhost-user|af_xdp|af_packet|tap [options]
//! vhuctl port del NAME | port list | port show NAME
//! vhuctl fdb show | fdb flush | fdb add MAC PORT [--vlan N]
//! vhuctl stats [PORT]
//! vhuctl capture PORT [-c N] [-s SECONDS] [-w FILE|-]
//! vhuctl log-level LEVEL
//! ```
//!
//! Human-readable tables by default, the API's JSON with `--json`.
//!
//! Exit codes: 0 done; 1 the switch refused the request (its message is
//! printed); 64 bad arguments; 69 the switch cannot be reached.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use vhu_api::client::{self, encode_segment, ClientError};
use vhu_api::{
    FdbAdd, FdbEntryView, Flushed, LogLevel, MacAddr, PortKind, PortSpec, PortStats, PortView,
    QueueStats, Role, Vlan, ZeroCopy,
};
use vhu_switch::config::DEFAULT_CONTROL_SOCKET;

/// Manage a running vhu-switch.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// The switch's control socket.
    #[arg(long, env = "VHU_SOCKET", default_value = DEFAULT_CONTROL_SOCKET)]
    socket: PathBuf,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Ports: add, remove, list, show.
    #[command(subcommand)]
    Port(PortCmd),
    /// The forwarding database.
    #[command(subcommand)]
    Fdb(FdbCmd),
    /// Counters of every port, or per queue of one.
    Stats {
        /// The port (all ports when absent).
        port: Option<String>,
    },
    /// Capture the frames crossing a port as pcap (`| tcpdump -r -`).
    Capture {
        /// The port.
        port: String,
        /// Stop after this many frames.
        #[arg(short = 'c', long)]
        count: Option<u64>,
        /// Stop after this many seconds.
        #[arg(short = 's', long)]
        seconds: Option<u64>,
        /// Write to this file (`-`: standard output, the default).
        #[arg(short = 'w', long, default_value = "-")]
        write: String,
    },
    /// Change the switch's log filter (`info`, `debug`, `warn,vhu_switch=debug`, ...).
    LogLevel {
        /// The filter.
        level: String,
    },
}

#[derive(Debug, Subcommand)]
enum PortCmd {
    /// Create a port.
    Add(Box<AddArgs>),
    /// Remove a port.
    Del {
        /// The port.
        name: String,
    },
    /// List the ports.
    List,
    /// Show one port with its state.
    Show {
        /// The port.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum FdbCmd {
    /// List the entries.
    Show,
    /// Remove the learned entries (static ones stay).
    Flush,
    /// Add a static entry.
    Add {
        /// The address.
        mac: MacAddr,
        /// The port.
        port: String,
        /// The VLAN (0: untagged frames of ports without a VLAN mode).
        #[arg(long, default_value_t = 0)]
        vlan: u32,
    },
}

#[derive(Debug, Args)]
struct AddArgs {
    /// The port's name.
    name: String,
    /// What it attaches to.
    #[arg(long, value_parser = parse_kind)]
    kind: PortKind,
    /// vhost-user: the socket (a file name under the switch's socket
    /// directory, or an absolute path).
    #[arg(long)]
    socket: Option<String>,
    /// vhost-user: `server` (the switch creates the socket) or `client`.
    #[arg(long, value_parser = parse_role)]
    role: Option<Role>,
    /// af_xdp, af_packet, tap: the interface.
    #[arg(long)]
    interface: Option<String>,
    /// Queue pairs (vhost-user) or queues.
    #[arg(long)]
    queues: Option<u32>,
    /// Allowed source MAC (repeat for several).
    #[arg(long)]
    mac: Vec<MacAddr>,
    /// MTU.
    #[arg(long)]
    mtu: Option<u32>,
    /// Access port in this VLAN.
    #[arg(long, conflicts_with = "trunk")]
    vlan: Option<u32>,
    /// Trunk port with these VLANs (comma-separated).
    #[arg(long, value_delimiter = ',')]
    trunk: Vec<u32>,
    /// The trunk's native VLAN.
    #[arg(long, requires = "trunk")]
    native: Option<u32>,
    /// Most addresses the switch learns on the port (its FDB share).
    #[arg(long)]
    mac_limit: Option<u32>,
    /// Most frames per second the port may flood (0: unlimited).
    #[arg(long)]
    flood_rate: Option<u32>,
    /// Frames a flood may bring at once beyond the rate.
    #[arg(long)]
    flood_burst: Option<u32>,
    /// Offer no checksum or segmentation offloads.
    #[arg(long)]
    no_offloads: bool,
    /// vhost-user server: the socket's owner.
    #[arg(long)]
    owner: Option<String>,
    /// vhost-user server: the socket's group.
    #[arg(long)]
    group: Option<String>,
    /// vhost-user server: the socket's mode (octal).
    #[arg(long)]
    mode: Option<String>,
    /// Serve the port on this PMD thread.
    #[arg(long)]
    pmd: Option<u32>,
    /// af_xdp: `off`, `try` or `require`.
    #[arg(long, value_parser = parse_zero_copy)]
    zero_copy: Option<ZeroCopy>,
    /// af_packet: bypass the qdisc layer on transmit.
    #[arg(long)]
    qdisc_bypass: bool,
}

fn parse_kind(s: &str) -> Result<PortKind, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| format!("{s:?}: expected vhost-user, af_xdp, af_packet or tap"))
}

fn parse_role(s: &str) -> Result<Role, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| format!("{s:?}: expected server or client"))
}

fn parse_zero_copy(s: &str) -> Result<ZeroCopy, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| format!("{s:?}: expected off, try or require"))
}

impl AddArgs {
    fn spec(self: Box<Self>) -> PortSpec {
        let mut p = PortSpec::new(self.name, self.kind);
        p.socket = self.socket;
        p.role = self.role;
        p.interface = self.interface;
        p.queues = self.queues;
        p.mac = (!self.mac.is_empty()).then_some(self.mac);
        p.mtu = self.mtu;
        p.vlan = match (self.vlan, self.trunk.is_empty()) {
            (Some(v), _) => Some(Vlan::Access(v)),
            (None, false) => Some(Vlan::Trunk {
                allowed: self.trunk,
                native: self.native,
            }),
            (None, true) => None,
        };
        p.mac_limit = self.mac_limit;
        p.flood_rate = self.flood_rate;
        p.flood_burst = self.flood_burst;
        p.offloads = self.no_offloads.then_some(false);
        p.owner = self.owner;
        p.group = self.group;
        p.mode = self.mode;
        p.pmd = self.pmd;
        p.zero_copy = self.zero_copy;
        p.qdisc_bypass = self.qdisc_bypass.then_some(true);
        p
    }
}

/// Why vhuctl stops.
#[derive(Debug)]
enum Failure {
    Usage(String),
    Unreachable(String),
    Refused(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Refused { .. } => Failure::Refused(e.to_string()),
            ClientError::Io(ref io) => Failure::Unreachable(format!("{e}: {io}")),
            ClientError::Protocol(_) => Failure::Unreachable(e.to_string()),
        }
    }
}

struct Ctl {
    socket: PathBuf,
    json: bool,
}

impl Ctl {
    fn connect(&self) -> Result<UnixStream, Failure> {
        vhost_net_backend::sys::unix::connect(&self.socket).map_err(|e| {
            Failure::Unreachable(format!(
                "cannot reach the switch at {}: {e} (is vhu-switch running? --socket names another)",
                self.socket.display()
            ))
        })
    }

    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<(T, Vec<u8>), Failure> {
        let (_, body) = client::call(self.connect()?, "GET", path, None)?;
        let v = serde_json::from_slice(&body)
            .map_err(|e| Failure::Unreachable(format!("unexpected answer: {e}")))?;
        Ok((v, body))
    }

    fn send(&self, method: &str, path: &str, body: Option<Vec<u8>>) -> Result<Vec<u8>, Failure> {
        Ok(client::call(self.connect()?, method, path, body.as_deref())?.1)
    }

    /// Prints the JSON as the switch sent it, or the table.
    fn show(&self, raw: &[u8], table: String) {
        let mut out = io::stdout().lock();
        let _ = if self.json {
            out.write_all(raw).and_then(|()| out.write_all(b"\n"))
        } else {
            out.write_all(table.as_bytes())
        };
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return if usage {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let ctl = Ctl {
        socket: cli.socket,
        json: cli.json,
    };
    match run(&ctl, cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            let (code, msg) = match f {
                Failure::Usage(m) => (64, m),
                Failure::Refused(m) => (1, m),
                Failure::Unreachable(m) => (69, m),
            };
            eprintln!("vhuctl: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(ctl: &Ctl, cmd: Cmd) -> Result<(), Failure> {
    match cmd {
        Cmd::Port(PortCmd::Add(a)) => {
            let body = serde_json::to_vec(&a.spec()).map_err(|e| Failure::Usage(e.to_string()))?;
            let raw = ctl.send("POST", "/ports", Some(body))?;
            let v: PortView = serde_json::from_slice(&raw)
                .map_err(|e| Failure::Unreachable(format!("unexpected answer: {e}")))?;
            ctl.show(&raw, port_table(&[v]));
        }
        Cmd::Port(PortCmd::Del { name }) => {
            ctl.send("DELETE", &format!("/ports/{}", encode_segment(&name)), None)?;
            if !ctl.json {
                println!("port {name} removed");
            }
        }
        Cmd::Port(PortCmd::List) => {
            let (v, raw): (Vec<PortView>, _) = ctl.get("/ports")?;
            ctl.show(&raw, port_table(&v));
        }
        Cmd::Port(PortCmd::Show { name }) => {
            let (v, raw): (PortView, _) = ctl.get(&format!("/ports/{}", encode_segment(&name)))?;
            ctl.show(&raw, port_detail(&v));
        }
        Cmd::Fdb(FdbCmd::Show) => {
            let (v, raw): (Vec<FdbEntryView>, _) = ctl.get("/fdb")?;
            ctl.show(&raw, fdb_table(&v));
        }
        Cmd::Fdb(FdbCmd::Flush) => {
            let raw = ctl.send("DELETE", "/fdb", None)?;
            let f: Flushed = serde_json::from_slice(&raw)
                .map_err(|e| Failure::Unreachable(format!("unexpected answer: {e}")))?;
            ctl.show(&raw, format!("{} learned entries flushed\n", f.flushed));
        }
        Cmd::Fdb(FdbCmd::Add { mac, port, vlan }) => {
            let body = serde_json::to_vec(&FdbAdd { mac, port, vlan })
                .map_err(|e| Failure::Usage(e.to_string()))?;
            let raw = ctl.send("POST", "/fdb", Some(body))?;
            let e: FdbEntryView = serde_json::from_slice(&raw)
                .map_err(|e| Failure::Unreachable(format!("unexpected answer: {e}")))?;
            ctl.show(&raw, fdb_table(&[e]));
        }
        Cmd::Stats { port: Some(p) } => {
            let (s, raw): (PortStats, _) =
                ctl.get(&format!("/ports/{}/stats", encode_segment(&p)))?;
            ctl.show(&raw, queue_table(&s));
        }
        Cmd::Stats { port: None } => {
            let (ports, _): (Vec<PortView>, _) = ctl.get("/ports")?;
            let mut all = Vec::new();
            for p in &ports {
                let (s, _): (PortStats, _) =
                    ctl.get(&format!("/ports/{}/stats", encode_segment(&p.spec.name)))?;
                all.push(s);
            }
            let raw = serde_json::to_vec(&all).unwrap_or_default();
            ctl.show(&raw, stats_table(&all));
        }
        Cmd::Capture {
            port,
            count,
            seconds,
            write,
        } => capture(ctl, &port, count, seconds, &write)?,
        Cmd::LogLevel { level } => {
            let body = serde_json::to_vec(&LogLevel { level })
                .map_err(|e| Failure::Usage(e.to_string()))?;
            let raw = ctl.send("PUT", "/log-level", Some(body))?;
            let l: LogLevel = serde_json::from_slice(&raw)
                .map_err(|e| Failure::Unreachable(format!("unexpected answer: {e}")))?;
            ctl.show(&raw, format!("log level: {}\n", l.level));
        }
    }
    Ok(())
}

fn capture(
    ctl: &Ctl,
    port: &str,
    count: Option<u64>,
    seconds: Option<u64>,
    write: &str,
) -> Result<(), Failure> {
    let mut path = format!("/ports/{}/capture", encode_segment(port));
    let q: Vec<String> = [("count", count), ("seconds", seconds)]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect();
    if !q.is_empty() {
        path.push('?');
        path.push_str(&q.join("&"));
    }
    let (head, mut body) = client::send(ctl.connect()?, "GET", &path, None)?;
    if head.status != 200 {
        let mut buf = Vec::new();
        let _ = body.take(64 * 1024).read_to_end(&mut buf);
        let msg = serde_json::from_slice::<vhu_api::ApiError>(&buf)
            .map(|e| e.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&buf).into_owned());
        return Err(Failure::Refused(format!("{msg} (HTTP {})", head.status)));
    }
    let mut out: Box<dyn Write> = if write == "-" {
        Box::new(io::stdout().lock())
    } else {
        Box::new(
            std::fs::File::create(write)
                .map_err(|e| Failure::Usage(format!("cannot create {write}: {e}")))?,
        )
    };
    match io::copy(&mut body, &mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        // The reader went away (`| head`): done.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Unreachable(format!("capture interrupted: {e}"))),
    }
}

fn vlan_text(v: Option<&Vlan>) -> String {
    match v {
        None => "-".into(),
        Some(Vlan::Access(a)) => a.to_string(),
        Some(Vlan::Trunk { allowed, native }) => {
            let list: Vec<String> = allowed.iter().map(u32::to_string).collect();
            match native {
                Some(n) => format!("trunk {} native {n}", list.join(",")),
                None => format!("trunk {}", list.join(",")),
            }
        }
    }
}

/// Lays out rows under a header, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<&str> = cells.collect();
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                let _ = write!(out, "{c:<w$}  ");
            }
        }
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    for r in rows {
        line(&mut out, &mut r.iter().map(String::as_str));
    }
    out
}

fn port_table(ports: &[PortView]) -> String {
    let rows: Vec<Vec<String>> = ports
        .iter()
        .map(|p| {
            let s = &p.spec;
            let at = match s.kind {
                PortKind::VhostUser => p.state.socket_path.clone().unwrap_or_default(),
                _ => s.interface.clone().unwrap_or_default(),
            };
            vec![
                s.name.clone(),
                s.kind.to_string(),
                if p.state.connected { "yes" } else { "no" }.into(),
                p.state.queue_pairs.to_string(),
                vlan_text(s.vlan.as_ref()),
                p.state.pmd.to_string(),
                at,
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "KIND",
            "CONNECTED",
            "QUEUES",
            "VLAN",
            "PMD",
            "SOCKET/INTERFACE",
        ],
        &rows,
    )
}

fn port_detail(p: &PortView) -> String {
    let s = &p.spec;
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<12} {v}");
    };
    kv("name", s.name.clone());
    kv("kind", s.kind.to_string());
    if let Some(r) = s.role {
        kv("role", format!("{r:?}").to_lowercase());
    }
    if let Some(sock) = &p.state.socket_path {
        kv("socket", sock.clone());
    }
    if let Some(i) = &s.interface {
        kv("interface", i.clone());
    }
    kv("connected", p.state.connected.to_string());
    kv("features", format!("{:#x}", p.state.features));
    kv(
        "queues",
        format!("{} (configured {})", p.state.queue_pairs, s.queues()),
    );
    kv("vlan", vlan_text(s.vlan.as_ref()));
    if let Some(m) = &s.mac {
        let list: Vec<String> = m.iter().map(ToString::to_string).collect();
        kv("mac", list.join(", "));
    }
    if let Some(m) = s.mtu {
        kv("mtu", m.to_string());
    }
    kv("offloads", s.offloads().to_string());
    kv("pmd", p.state.pmd.to_string());
    kv("origin", p.state.origin.clone());
    out
}

fn fdb_table(entries: &[FdbEntryView]) -> String {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.vlan.to_string(),
                e.mac.to_string(),
                e.port.clone(),
                if e.is_static { "static" } else { "learned" }.into(),
                e.age_secs.to_string(),
            ]
        })
        .collect();
    table(&["VLAN", "MAC", "PORT", "TYPE", "AGE(s)"], &rows)
}

fn counter_cells(q: &QueueStats) -> Vec<String> {
    vec![
        q.rx_packets.to_string(),
        q.rx_bytes.to_string(),
        q.rx_dropped_total().to_string(),
        q.tx_packets.to_string(),
        q.tx_bytes.to_string(),
        q.tx_dropped_total().to_string(),
    ]
}

const COUNTER_HEADER: [&str; 6] = [
    "RX_PKTS", "RX_BYTES", "RX_DROP", "TX_PKTS", "TX_BYTES", "TX_DROP",
];

fn stats_table(all: &[PortStats]) -> String {
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|s| {
            let mut r = vec![s.port.clone()];
            r.extend(counter_cells(&s.total));
            r
        })
        .collect();
    let mut h = vec!["PORT"];
    h.extend(COUNTER_HEADER);
    table(&h, &rows)
}

fn queue_table(s: &PortStats) -> String {
    let mut rows: Vec<Vec<String>> = s
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let mut r = vec![i.to_string()];
            r.extend(counter_cells(q));
            r
        })
        .collect();
    let mut total = vec!["total".to_owned()];
    total.extend(counter_cells(&s.total));
    rows.push(total);
    let mut h = vec!["QUEUE"];
    h.extend(COUNTER_HEADER);
    let mut out = table(&h, &rows);
    for (dir, drops) in [("rx", &s.total.rx_dropped), ("tx", &s.total.tx_dropped)] {
        for (reason, n) in drops.iter().filter(|(_, n)| **n > 0) {
            let _ = writeln!(out, "{dir} dropped {reason}: {n}");
        }
    }
    let f = &s.fdb;
    let _ = writeln!(
        out,
        "fdb: {} learned of {}, {} refused",
        f.learned, f.limit, f.learn_refused
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_args_make_the_spec() {
        let cli = Cli::try_parse_from([
            "vhuctl",
            "port",
            "add",
            "vm1",
            "--kind",
            "vhost-user",
            "--role",
            "client",
            "--socket",
            "/run/vm1.sock",
            "--trunk",
            "10,20",
            "--native",
            "10",
            "--mac",
            "52:54:00:00:00:01",
            "--mac-limit",
            "8",
            "--flood-rate",
            "1000",
            "--flood-burst",
            "50",
            "--no-offloads",
        ])
        .unwrap();
        let Cmd::Port(PortCmd::Add(a)) = cli.cmd else {
            panic!()
        };
        let s = a.spec();
        assert_eq!(s.kind, PortKind::VhostUser);
        assert_eq!(s.role, Some(Role::Client));
        assert_eq!(
            s.vlan,
            Some(Vlan::Trunk {
                allowed: vec![10, 20],
                native: Some(10)
            })
        );
        assert_eq!(s.offloads, Some(false));
        assert_eq!(
            (s.mac_limit, s.flood_rate, s.flood_burst),
            (Some(8), Some(1000), Some(50))
        );
        assert_eq!(s.validate(), Ok(()));
        assert!(Cli::try_parse_from(["vhuctl", "port", "add", "x", "--kind", "ovs"]).is_err());
        assert!(Cli::try_parse_from([
            "vhuctl", "port", "add", "x", "--kind", "tap", "--vlan", "1", "--trunk", "2"
        ])
        .is_err());
    }

    #[test]
    fn tables_align() {
        let t = table(&["A", "LONGER"], &[vec!["xxxx".into(), "1".into()]]);
        assert_eq!(t, "A     LONGER\nxxxx  1\n");
    }
}

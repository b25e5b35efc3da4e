// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `/metrics`: the Prometheus text exposition format (version 0.0.4).
//!
//! Design: the data plane counts in per-queue and per-PMD atomics, added once
//! per burst (see `vhost_net_backend::stats`); a scrape takes a snapshot of
//! them ([`Snapshot`]) and renders it here. Nothing resets: counters grow
//! for the life of the process (a port that is removed and added again
//! starts from zero, as a new series would), and wrap after 2^64.
//!
//! Directions are the port's: `rx` is into the port's guest or NIC (what it
//! receives), `tx` is what it sends into the switch.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `vhu_port_rx_packets_total`, `vhu_port_rx_bytes_total`, `vhu_port_tx_packets_total`, `vhu_port_tx_bytes_total` | counter | `port`, `queue` |
//! | `vhu_port_rx_dropped_total`, `vhu_port_tx_dropped_total` | counter | `port`, `queue`, `reason` |
//! | `vhu_port_connected` | gauge | `port`, `kind` |
//! | `vhu_port_announces_total`, `vhu_port_announces_refused_total` | counter | `port` |
//! | `vhu_port_fdb_learned`, `vhu_port_fdb_limit` | gauge | `port` |
//! | `vhu_port_fdb_learn_refused_total` | counter | `port` |
//! | `vhu_pmd_busy_cycles_total`, `vhu_pmd_idle_cycles_total`, `vhu_pmd_frames_total`, `vhu_pmd_busy_rounds_total` | counter | `pmd` |
//! | `vhu_fdb_entries` | gauge | |
//! | `vhu_fdb_learned_total`, `vhu_fdb_moved_total`, `vhu_fdb_aged_total`, `vhu_fdb_limit_hits_total` | counter | |
//! | `vhu_guest_memory_faults_total` | counter | |

use std::fmt::Write;

use vhost_net_backend::DropReason;
use vhu_api::view::PortFdbStats;
use vhu_api::QueueStats;

use crate::fdb::FdbCounters;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One port: the counters `GET /ports/{name}/stats` shows, per queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSample {
    /// Its name.
    pub name: String,
    /// Its kind (`vhost-user`, ...).
    pub kind: String,
    /// Whether a frontend is connected (uplinks: whether the interface is
    /// open).
    pub connected: bool,
    /// Announces of a migrated guest made for the port (`SEND_RARP`).
    pub announces: u64,
    /// Announces refused (an address the port may not use).
    pub announces_refused: u64,
    /// Per queue (pair).
    pub queues: Vec<QueueStats>,
    /// Its share of the FDB.
    pub fdb: PortFdbStats,
}

/// One PMD thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmdSample {
    /// Its index.
    pub id: usize,
    /// TSC cycles spent in polls that moved frames.
    pub busy_cycles: u64,
    /// TSC cycles spent in polls that found nothing.
    pub idle_cycles: u64,
    /// Frames it moved.
    pub frames: u64,
    /// Polls that moved frames (frames / busy rounds: the average burst).
    pub busy_rounds: u64,
}

/// Everything `/metrics` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Ports, in name order.
    pub ports: Vec<PortSample>,
    /// PMD threads.
    pub pmds: Vec<PmdSample>,
    /// FDB entries now.
    pub fdb_entries: u64,
    /// FDB counters.
    pub fdb: FdbCounters,
    /// Pages of guest memory read as zeros after their frontend truncated
    /// its memory file under the mapping
    /// (`vhost_net_backend::sys::sigbus`).
    pub guest_memory_faults: u64,
}

/// Writes families of samples in the text format.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// A metric's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Exposition {
    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample of the current family.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.out.push_str("\\\\"),
                        '"' => self.out.push_str("\\\""),
                        '\n' => self.out.push_str("\\n"),
                        c => self.out.push(c),
                    }
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A family: name, help, and how to read its value from a row.
type Family<T> = (&'static str, &'static str, fn(&T) -> u64);
/// A row: its labels and what the families read.
type Row<'a, T> = (Vec<(&'static str, String)>, &'a T);

/// Writes each family over every row.
fn emit<T>(e: &mut Exposition, kind: Kind, families: &[Family<T>], rows: &[Row<'_, T>]) {
    for (name, help, get) in families {
        e.family(name, help, kind);
        for (labels, item) in rows {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            e.sample(name, &labels, get(item));
        }
    }
}

const QUEUE_FAMILIES: [Family<QueueStats>; 4] = [
    (
        "vhu_port_rx_packets_total",
        "Frames delivered into the port's guest or NIC.",
        |q| q.rx_packets,
    ),
    (
        "vhu_port_rx_bytes_total",
        "Bytes of the frames delivered into the port's guest or NIC.",
        |q| q.rx_bytes,
    ),
    (
        "vhu_port_tx_packets_total",
        "Frames the port's guest or NIC sent into the switch.",
        |q| q.tx_packets,
    ),
    (
        "vhu_port_tx_bytes_total",
        "Bytes of the frames the port's guest or NIC sent into the switch.",
        |q| q.tx_bytes,
    ),
];

const ANNOUNCE_FAMILIES: [Family<PortSample>; 2] = [
    (
        "vhu_port_announces_total",
        "Announces of a migrated guest (SEND_RARP) made for the port: FDB moved to it, RARP flooded in its VLAN.",
        |p| p.announces,
    ),
    (
        "vhu_port_announces_refused_total",
        "Announces refused: an address the port may not use (mac lock, VLAN, static entry elsewhere, full table).",
        |p| p.announces_refused,
    ),
];

const PORT_FDB_GAUGES: [Family<PortSample>; 2] = [
    (
        "vhu_port_fdb_learned",
        "Addresses learned on the port now.",
        |p| p.fdb.learned,
    ),
    (
        "vhu_port_fdb_limit",
        "The port's quota of learned addresses (mac_limit, or the switch's default for its kind).",
        |p| p.fdb.limit,
    ),
];

const PORT_FDB_COUNTERS: [Family<PortSample>; 1] = [(
    "vhu_port_fdb_learn_refused_total",
    "Source addresses of the port's frames not learned: the port held its quota or the table was full (once per address per source burst; the frames were forwarded).",
    |p| p.fdb.learn_refused,
)];

const PMD_FAMILIES: [Family<PmdSample>; 4] = [
    (
        "vhu_pmd_busy_cycles_total",
        "TSC cycles the PMD thread spent in polls that moved frames.",
        |p| p.busy_cycles,
    ),
    (
        "vhu_pmd_idle_cycles_total",
        "TSC cycles the PMD thread spent in polls that found nothing.",
        |p| p.idle_cycles,
    ),
    (
        "vhu_pmd_frames_total",
        "Frames the PMD thread moved.",
        |p| p.frames,
    ),
    (
        "vhu_pmd_busy_rounds_total",
        "Polls of all the PMD's queues that moved frames (frames / busy rounds: the average burst).",
        |p| p.busy_rounds,
    ),
];

const FDB_FAMILIES: [Family<Snapshot>; 4] = [
    ("vhu_fdb_learned_total", "Addresses learned.", |s| {
        s.fdb.learned
    }),
    (
        "vhu_fdb_moved_total",
        "Addresses that moved to another port.",
        |s| s.fdb.moved,
    ),
    ("vhu_fdb_aged_total", "Entries that aged out.", |s| {
        s.fdb.aged
    }),
    (
        "vhu_fdb_limit_hits_total",
        "Addresses not learned because the table or a port's quota was full.",
        |s| s.fdb.limit_hits,
    ),
];

/// Renders a snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut e = Exposition::default();
    let queues: Vec<Row<'_, QueueStats>> = s
        .ports
        .iter()
        .flat_map(|p| {
            p.queues
                .iter()
                .enumerate()
                .map(|(i, q)| (vec![("port", p.name.clone()), ("queue", i.to_string())], q))
        })
        .collect();
    emit(&mut e, Kind::Counter, &QUEUE_FAMILIES, &queues);
    // Every reason of every queue, zeros included: series do not appear
    // out of nowhere when a first drop happens.
    for (name, help, rx) in [
        (
            "vhu_port_rx_dropped_total",
            "Frames for the port that were not delivered, by reason.",
            true,
        ),
        (
            "vhu_port_tx_dropped_total",
            "Frames from the port that were not forwarded, by reason.",
            false,
        ),
    ] {
        e.family(name, help, Kind::Counter);
        for (labels, q) in &queues {
            let drops = if rx { &q.rx_dropped } else { &q.tx_dropped };
            for r in DropReason::ALL {
                let n = drops.get(r.name()).copied().unwrap_or(0);
                e.sample(
                    name,
                    &[
                        ("port", &labels[0].1),
                        ("queue", &labels[1].1),
                        ("reason", r.name()),
                    ],
                    n,
                );
            }
        }
    }
    let connected: Vec<Row<'_, PortSample>> = s
        .ports
        .iter()
        .map(|p| (vec![("port", p.name.clone()), ("kind", p.kind.clone())], p))
        .collect();
    let connected_family: [Family<PortSample>; 1] = [(
        "vhu_port_connected",
        "1 while a frontend is connected to the port (uplinks: while the interface is open).",
        |p| u64::from(p.connected),
    )];
    emit(&mut e, Kind::Gauge, &connected_family, &connected);
    let port_rows: Vec<Row<'_, PortSample>> = s
        .ports
        .iter()
        .map(|p| (vec![("port", p.name.clone())], p))
        .collect();
    emit(&mut e, Kind::Counter, &ANNOUNCE_FAMILIES, &port_rows);
    emit(&mut e, Kind::Gauge, &PORT_FDB_GAUGES, &port_rows);
    emit(&mut e, Kind::Counter, &PORT_FDB_COUNTERS, &port_rows);
    let pmds: Vec<Row<'_, PmdSample>> = s
        .pmds
        .iter()
        .map(|p| (vec![("pmd", p.id.to_string())], p))
        .collect();
    emit(&mut e, Kind::Counter, &PMD_FAMILIES, &pmds);
    let whole: [Row<'_, Snapshot>; 1] = [(Vec::new(), s)];
    let entries: [Family<Snapshot>; 1] = [(
        "vhu_fdb_entries",
        "Entries in the forwarding database.",
        |s| s.fdb_entries,
    )];
    emit(&mut e, Kind::Gauge, &entries, &whole);
    emit(&mut e, Kind::Counter, &FDB_FAMILIES, &whole);
    let faults: [Family<Snapshot>; 1] = [(
        "vhu_guest_memory_faults_total",
        "Pages of guest memory a frontend truncated away under the switch's mapping, read as zeros since (its own frames from there are lost).",
        |s| s.guest_memory_faults,
    )];
    emit(&mut e, Kind::Counter, &faults, &whole);
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_help_and_type() {
        let mut q = QueueStats {
            rx_packets: 5,
            tx_bytes: 640,
            ..QueueStats::default()
        };
        q.rx_dropped.insert("no_buffers".into(), 2);
        let s = Snapshot {
            ports: vec![PortSample {
                name: "vm\"1".into(),
                kind: "vhost-user".into(),
                connected: true,
                announces: 2,
                announces_refused: 1,
                queues: vec![q],
                fdb: PortFdbStats {
                    learned: 3,
                    limit: 256,
                    learn_refused: 9,
                },
            }],
            pmds: vec![PmdSample {
                id: 0,
                busy_cycles: 100,
                idle_cycles: 7,
                frames: 5,
                busy_rounds: 2,
            }],
            fdb_entries: 3,
            fdb: FdbCounters {
                learned: 4,
                ..FdbCounters::default()
            },
            guest_memory_faults: 1,
        };
        let t = render(&s);
        assert!(
            t.contains("vhu_port_rx_packets_total{port=\"vm\\\"1\",queue=\"0\"} 5\n"),
            "{t}"
        );
        assert!(t.contains("vhu_port_tx_bytes_total{port=\"vm\\\"1\",queue=\"0\"} 640\n"));
        assert!(t.contains(
            "vhu_port_rx_dropped_total{port=\"vm\\\"1\",queue=\"0\",reason=\"no_buffers\"} 2\n"
        ));
        assert!(t.contains("vhu_port_connected{port=\"vm\\\"1\",kind=\"vhost-user\"} 1\n"));
        assert!(t.contains("vhu_pmd_busy_cycles_total{pmd=\"0\"} 100\n"));
        assert!(t.contains("vhu_pmd_busy_rounds_total{pmd=\"0\"} 2\n"));
        assert!(
            t.contains("vhu_port_announces_total{port=\"vm\\\"1\"} 2\n"),
            "{t}"
        );
        assert!(t.contains("vhu_port_announces_refused_total{port=\"vm\\\"1\"} 1\n"));
        assert!(t.contains("vhu_fdb_entries 3\n"));
        assert!(
            t.contains("vhu_port_fdb_learned{port=\"vm\\\"1\"} 3\n"),
            "{t}"
        );
        assert!(t.contains("vhu_port_fdb_limit{port=\"vm\\\"1\"} 256\n"));
        assert!(t.contains("vhu_port_fdb_learn_refused_total{port=\"vm\\\"1\"} 9\n"));
        assert!(t.contains(
            "vhu_port_tx_dropped_total{port=\"vm\\\"1\",queue=\"0\",reason=\"flood_rate\"} 0\n"
        ));
        assert!(t.contains("vhu_fdb_learned_total 4\n"));
        assert!(t.contains("vhu_guest_memory_faults_total 1\n"));
        // Each family: HELP, then TYPE, then its samples only.
        let mut family = "";
        for line in t.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                family = rest.split(' ').next().unwrap();
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                assert!(rest.starts_with(family), "{line}");
                let counter = rest.ends_with(" counter");
                assert_eq!(counter, family.ends_with("_total"), "{line}");
            } else {
                assert!(line.starts_with(family), "{line} outside {family}");
            }
        }
        let reasons = t
            .lines()
            .filter(|l| l.starts_with("vhu_port_rx_dropped_total{"))
            .count();
        assert_eq!(reasons, DropReason::COUNT);
    }
}

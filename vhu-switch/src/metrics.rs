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
//! | `vhu_pmd_busy_cycles_total`, `vhu_pmd_idle_cycles_total`, `vhu_pmd_frames_total` | counter | `pmd` |
//! | `vhu_fdb_entries` | gauge | |
//! | `vhu_fdb_learned_total`, `vhu_fdb_moved_total`, `vhu_fdb_aged_total`, `vhu_fdb_limit_hits_total` | counter | |

use std::fmt::Write;

use vhost_net_backend::stats::DropCounts;

use crate::fdb::FdbCounters;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counters of one queue (pair) of a port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSample {
    /// Frames into the port's guest or NIC.
    pub rx_packets: u64,
    /// Bytes of those.
    pub rx_bytes: u64,
    /// Frames from the port into the switch.
    pub tx_packets: u64,
    /// Bytes of those.
    pub tx_bytes: u64,
    /// Frames for the port that did not make it, by reason.
    pub rx_drops: DropCounts,
    /// Frames from the port that went nowhere, by reason.
    pub tx_drops: DropCounts,
}

/// One port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortSample {
    /// Its name.
    pub name: String,
    /// Its kind (`vhost-user`, ...).
    pub kind: String,
    /// Whether a frontend is connected (uplinks: whether the interface is
    /// open).
    pub connected: bool,
    /// Per queue (pair).
    pub queues: Vec<QueueSample>,
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

/// Renders a snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut e = Exposition::default();
    type Get = fn(&QueueSample) -> u64;
    let queue_counters: [(&str, &str, Get); 4] = [
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
    for (name, help, get) in queue_counters {
        e.family(name, help, Kind::Counter);
        for p in &s.ports {
            for (i, q) in p.queues.iter().enumerate() {
                e.sample(
                    name,
                    &[("port", &p.name), ("queue", &i.to_string())],
                    get(q),
                );
            }
        }
    }
    type Drops = fn(&QueueSample) -> &DropCounts;
    let drop_counters: [(&str, &str, Drops); 2] = [
        (
            "vhu_port_rx_dropped_total",
            "Frames for the port that were not delivered, by reason.",
            |q| &q.rx_drops,
        ),
        (
            "vhu_port_tx_dropped_total",
            "Frames from the port that were not forwarded, by reason.",
            |q| &q.tx_drops,
        ),
    ];
    for (name, help, get) in drop_counters {
        e.family(name, help, Kind::Counter);
        for p in &s.ports {
            for (i, q) in p.queues.iter().enumerate() {
                let qi = i.to_string();
                for (r, n) in get(q).iter() {
                    e.sample(
                        name,
                        &[("port", &p.name), ("queue", &qi), ("reason", r.name())],
                        n,
                    );
                }
            }
        }
    }
    e.family(
        "vhu_port_connected",
        "1 while a frontend is connected to the port (uplinks: while the interface is open).",
        Kind::Gauge,
    );
    for p in &s.ports {
        e.sample(
            "vhu_port_connected",
            &[("port", &p.name), ("kind", &p.kind)],
            u64::from(p.connected),
        );
    }
    type Pmd = fn(&PmdSample) -> u64;
    let pmd_counters: [(&str, &str, Pmd); 3] = [
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
    ];
    for (name, help, get) in pmd_counters {
        e.family(name, help, Kind::Counter);
        for p in &s.pmds {
            e.sample(name, &[("pmd", &p.id.to_string())], get(p));
        }
    }
    e.family(
        "vhu_fdb_entries",
        "Entries in the forwarding database.",
        Kind::Gauge,
    );
    e.sample("vhu_fdb_entries", &[], s.fdb_entries);
    let fdb: [(&str, &str, u64); 4] = [
        ("vhu_fdb_learned_total", "Addresses learned.", s.fdb.learned),
        (
            "vhu_fdb_moved_total",
            "Addresses that moved to another port.",
            s.fdb.moved,
        ),
        ("vhu_fdb_aged_total", "Entries that aged out.", s.fdb.aged),
        (
            "vhu_fdb_limit_hits_total",
            "Addresses not learned because the table or a port's quota was full.",
            s.fdb.limit_hits,
        ),
    ];
    for (name, help, v) in fdb {
        e.family(name, help, Kind::Counter);
        e.sample(name, &[], v);
    }
    e.finish()
}

#[cfg(test)]
mod tests {
    use vhost_net_backend::DropReason;

    use super::*;

    #[test]
    fn renders_every_family_with_help_and_type() {
        let mut q = QueueSample {
            rx_packets: 5,
            tx_bytes: 640,
            ..QueueSample::default()
        };
        q.rx_drops.add(DropReason::NoBuffers, 2);
        let s = Snapshot {
            ports: vec![PortSample {
                name: "vm\"1".into(),
                kind: "vhost-user".into(),
                connected: true,
                queues: vec![q],
            }],
            pmds: vec![PmdSample {
                id: 0,
                busy_cycles: 100,
                idle_cycles: 7,
                frames: 5,
            }],
            fdb_entries: 3,
            fdb: FdbCounters {
                learned: 4,
                ..FdbCounters::default()
            },
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
        assert!(t.contains("vhu_fdb_entries 3\n"));
        assert!(t.contains("vhu_fdb_learned_total 4\n"));
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

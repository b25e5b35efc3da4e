// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What testpmd reports, parsed: `show port stats`, the forward statistics
//! of `stop`, the forwarding core's cycles, and a throughput sample made of
//! two readings.

use std::time::Duration;

/// One port's block of `show port stats all` (ethdev counters, cumulative
/// since start-up, plus testpmd's rates since the previous `show`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Port id.
    pub port: u16,
    /// Frames received (returned by the PMD's rx burst).
    pub rx_packets: u64,
    /// Frames the device dropped for lack of RX buffers (`imissed`).
    pub rx_missed: u64,
    /// Bytes received (L2, without virtio-net header).
    pub rx_bytes: u64,
    /// Erroneous frames received.
    pub rx_errors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
    /// Frames transmitted (accepted by the PMD's tx burst).
    pub tx_packets: u64,
    /// Failed transmissions.
    pub tx_errors: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// RX packets per second since the previous `show port stats` of this
    /// port, on testpmd's clock (0 on the first call).
    pub rx_pps: u64,
    /// RX bits per second since the previous `show` (frame bytes x 8).
    pub rx_bps: u64,
    /// TX packets per second since the previous `show`.
    pub tx_pps: u64,
    /// TX bits per second since the previous `show`.
    pub tx_bps: u64,
}

/// One stream's block of the forward statistics printed at `stop`. testpmd
/// prints a stream only when it forwarded or dropped something, and only
/// when there are more streams than ports (several queues).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// The port the stream receives from.
    pub rx_port: u16,
    /// The queue the stream receives from.
    pub rx_queue: u16,
    /// The port the stream transmits to.
    pub tx_port: u16,
    /// The queue the stream transmits to.
    pub tx_queue: u16,
    /// Frames received by the stream.
    pub rx_packets: u64,
    /// Frames transmitted by the stream.
    pub tx_packets: u64,
    /// Frames the stream failed to transmit (TX ring full) and freed.
    pub tx_dropped: u64,
}

/// A port's (or all ports') forward statistics printed at `stop`: the
/// counts since the last `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortFwdStats {
    /// Port id (`u16::MAX` for the "all ports" total).
    pub port: u16,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames dropped on receive (`imissed`).
    pub rx_dropped: u64,
    /// Received and dropped.
    pub rx_total: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Frames the forwarding engine could not transmit.
    pub tx_dropped: u64,
    /// Transmitted and dropped.
    pub tx_total: u64,
}

/// The forward statistics printed by `stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FwdStats {
    /// Per-stream blocks (only streams with traffic; none with one queue).
    pub streams: Vec<StreamStats>,
    /// Per-port blocks.
    pub ports: Vec<PortFwdStats>,
    /// The "Accumulated forward statistics for all ports" block.
    pub total: PortFwdStats,
}

impl FwdStats {
    /// The stream receiving from `port`/`queue`, if it had traffic.
    pub fn stream(&self, port: u16, queue: u16) -> Option<&StreamStats> {
        self.streams
            .iter()
            .find(|s| s.rx_port == port && s.rx_queue == queue)
    }
}

/// A throughput sample from [`Testpmd::measure`](super::Testpmd::measure).
///
/// The headline figure, [`Throughput::mpps`], is testpmd's own `Rx-pps` of
/// the second of two `show port stats all`, summed over ports: testpmd
/// divides the RX-packets delta between the two calls by the time between
/// them on its own clock (`clock_gettime` inside the same call that reads the
/// counters). That is what `research/anchor-figures.md` reports, so figures
/// compare. [`Throughput::mpps_host_clock`] is the same delta over the
/// harness's clock (which includes the command round trips) as a cross-check.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Throughput {
    /// Time between the two readings on the harness's clock.
    pub window: Duration,
    /// RX-packets delta, all ports.
    pub rx_packets: u64,
    /// RX-bytes delta, all ports.
    pub rx_bytes: u64,
    /// TX-packets delta, all ports.
    pub tx_packets: u64,
    /// testpmd's `Rx-pps`, summed over ports.
    pub rx_pps: u64,
    /// testpmd's `Rx-bps`, summed over ports.
    pub rx_bps: u64,
    /// testpmd's `Tx-pps`, summed over ports.
    pub tx_pps: u64,
    /// Fraction of the machine's CPU time stolen by the hypervisor during
    /// the window (should be ~0).
    pub steal: f64,
    /// Fraction of the machine's CPU time (all CPUs) used during the window
    /// by anything but this testpmd and the `peers` given to
    /// [`Testpmd::measure_with_peers`](super::Testpmd::measure_with_peers): foreign load that takes cycles out
    /// of the busy-polling loops. Should be ~0; with two cores, 0.05 is a
    /// tenth of one core.
    pub foreign: f64,
    /// This testpmd's own forwarding cycles over the window, when it runs
    /// with `--record-core-cycles` ([`Testpmd::core_cycles`](super::Testpmd::core_cycles)): what the
    /// frontend spends per frame with each backend.
    pub cycles: Option<CoreCycles>,
}

impl Throughput {
    /// Million frames received per second, testpmd's clock.
    pub fn mpps(&self) -> f64 {
        self.rx_pps as f64 / 1e6
    }

    /// Million frames received per second, RX-packets delta over the
    /// harness's clock.
    pub fn mpps_host_clock(&self) -> f64 {
        self.rx_packets as f64 / self.window.as_secs_f64() / 1e6
    }

    /// Gigabits per second of L2 frame bytes received, testpmd's clock.
    pub fn gbps(&self) -> f64 {
        self.rx_bps as f64 / 1e9
    }

    /// Average received frame length in bytes (RX-bytes / RX-packets delta).
    pub fn avg_frame_len(&self) -> f64 {
        if self.rx_packets == 0 {
            0.0
        } else {
            self.rx_bytes as f64 / self.rx_packets as f64
        }
    }
}

impl std::fmt::Display for Throughput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} Mpps ({:.3} Mpps on the harness clock), {:.2} Gbps, {:.1} B/frame, \
             {} frames in {:.2} s, steal {:.1} %, foreign CPU {:.1} %",
            self.mpps(),
            self.mpps_host_clock(),
            self.gbps(),
            self.avg_frame_len(),
            self.rx_packets,
            self.window.as_secs_f64(),
            self.steal * 100.0,
            self.foreign * 100.0
        )
    }
}

/// Whether testpmd's `label` names the counter `field`: the label is the
/// field's name with `-` for `_`, in either case (`RX-packets`, `Rx-pps`).
fn is_label_of(label: &str, field: &str) -> bool {
    label.len() == field.len()
        && label
            .bytes()
            .zip(field.bytes())
            .all(|(l, f)| l.to_ascii_lowercase() == if f == b'_' { b'-' } else { f })
}

/// Implements, for a statistics block's struct, storing the numeric fields
/// of a line in the listed counters ([`is_label_of`]) and adding another
/// block's counters.
macro_rules! impl_counters {
    ($ty:ident: $($field:ident)*) => {
        impl $ty {
            /// Stores the numeric fields of `line` in the counters they label.
            fn set_from(&mut self, line: &str) {
                for (key, value) in fields(line) {
                    $(if is_label_of(key, stringify!($field)) {
                        self.$field = value;
                    })*
                }
            }

            /// Adds `other`'s counters to these.
            #[allow(dead_code)] // not every block is summed
            fn add(&mut self, other: &Self) {
                $(self.$field += other.$field;)*
            }
        }
    };
}

impl_counters! { PortStats:
    rx_packets rx_missed rx_bytes rx_errors rx_nombuf tx_packets tx_errors tx_bytes
    rx_pps rx_bps tx_pps tx_bps
}
impl_counters! { StreamStats: rx_packets tx_packets tx_dropped }
impl_counters! { PortFwdStats: rx_packets rx_dropped rx_total tx_packets tx_dropped tx_total }

/// `Key: value` pairs of a testpmd statistics line, e.g.
/// `RX-packets: 0   RX-missed: 0   RX-bytes:  0`. Only numeric values count.
fn fields(line: &str) -> Vec<(&str, u64)> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    tokens
        .windows(2)
        .filter_map(|w| {
            let key = w[0].strip_suffix(':')?;
            Some((key, w[1].parse().ok()?))
        })
        .collect()
}

/// Whether `line` is a rule made of one repeated character (`####`, `----`,
/// `++++`) closing a statistics block.
fn is_rule(line: &str) -> bool {
    let t = line.trim();
    let mut chars = t.chars();
    match chars.next() {
        Some(c @ ('#' | '-' | '+')) => t.len() > 8 && chars.all(|x| x == c),
        _ => false,
    }
}

/// All decimal numbers in `s`, in order.
fn numbers(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// Parses the output of `show port stats all` (or `show port stats N`).
pub fn parse_port_stats(text: &str) -> Vec<PortStats> {
    let mut out = Vec::new();
    let mut cur: Option<PortStats> = None;
    for line in text.lines() {
        if let Some(rest) = line.split("NIC statistics for port").nth(1) {
            if let Some(done) = cur.take() {
                out.push(done);
            }
            let port = numbers(rest).first().copied().unwrap_or(0);
            cur = Some(PortStats {
                port: u16::try_from(port).unwrap_or(u16::MAX),
                ..PortStats::default()
            });
            continue;
        }
        let Some(s) = cur.as_mut() else { continue };
        if is_rule(line) {
            out.push(cur.take().expect("checked above"));
            continue;
        }
        s.set_from(line);
    }
    out.extend(cur);
    out
}

/// Which block of the `stop` output a line belongs to.
enum FwdBlock {
    Stream(usize),
    Port(usize),
    Total,
}

/// Parses the forward statistics printed by `stop`.
pub fn parse_fwd_stats(text: &str) -> FwdStats {
    let mut st = FwdStats {
        total: PortFwdStats {
            port: u16::MAX,
            ..PortFwdStats::default()
        },
        ..FwdStats::default()
    };
    let mut block = None;
    let to_u16 = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
    for line in text.lines() {
        if let Some(rest) = line.split("Forward Stats for RX Port=").nth(1) {
            let n = numbers(rest);
            if n.len() >= 4 {
                st.streams.push(StreamStats {
                    rx_port: to_u16(n[0]),
                    rx_queue: to_u16(n[1]),
                    tx_port: to_u16(n[2]),
                    tx_queue: to_u16(n[3]),
                    ..StreamStats::default()
                });
                block = Some(FwdBlock::Stream(st.streams.len() - 1));
            }
            continue;
        }
        if let Some(rest) = line.split("Forward statistics for port").nth(1) {
            let port = numbers(rest).first().copied().unwrap_or(0);
            st.ports.push(PortFwdStats {
                port: to_u16(port),
                ..PortFwdStats::default()
            });
            block = Some(FwdBlock::Port(st.ports.len() - 1));
            continue;
        }
        if line.contains("Accumulated forward statistics for all ports") {
            block = Some(FwdBlock::Total);
            continue;
        }
        if is_rule(line) {
            block = None;
            continue;
        }
        match block {
            Some(FwdBlock::Stream(i)) => st.streams[i].set_from(line),
            Some(FwdBlock::Port(i)) => st.ports[i].set_from(line),
            Some(FwdBlock::Total) => st.total.set_from(line),
            None => {}
        }
    }
    st
}

/// Sums of the packet and byte counters of several ports (rates included).
pub fn sum_port_stats(stats: &[PortStats]) -> PortStats {
    let mut sum = PortStats {
        port: u16::MAX,
        ..PortStats::default()
    };
    for s in stats {
        sum.add(s);
    }
    sum
}

/// See [`Testpmd::core_cycles`](super::Testpmd::core_cycles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreCycles {
    /// Cycles of forwarding calls that received packets.
    pub cycles: u64,
    /// Packets those calls received.
    pub packets: u64,
    /// The TSC rate testpmd assumed, in MHz.
    pub mhz: u64,
}

impl CoreCycles {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            cycles: self.cycles.saturating_sub(earlier.cycles),
            packets: self.packets.saturating_sub(earlier.packets),
            mhz: self.mhz,
        }
    }

    /// Cycles per packet.
    pub fn per_packet(&self) -> Option<f64> {
        (self.packets > 0).then(|| self.cycles as f64 / self.packets as f64)
    }

    /// The counted cycles as a fraction of `window` of one core's time.
    pub fn fraction_of(&self, window: Duration) -> Option<f64> {
        let all = self.mhz as f64 * 1e6 * window.as_secs_f64();
        (all > 0.0).then(|| self.cycles as f64 / all)
    }
}

/// Parses the `CPU cycles/packet=` line of `show fwd stats all` (the last
/// one: the accumulated totals).
pub fn parse_core_cycles(out: &str) -> Option<CoreCycles> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("CPU cycles/packet="))?;
    let num_after = |key: &str| -> Option<u64> {
        let rest = &line[line.find(key)? + key.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    let packets = {
        let at = line.find(" packets=")?;
        let rest = &line[at + " packets=".len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()?
    };
    Some(CoreCycles {
        cycles: num_after("cycles=")?,
        packets,
        mhz: num_after(") at ")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One port's block of `show port stats`, laid out as testpmd prints it; `c` holds
    /// RX-packets, RX-missed, RX-bytes, RX-errors, RX-nombuf, TX-packets, TX-errors, TX-bytes,
    /// Rx-pps, Rx-bps, Tx-pps and Tx-bps.
    fn nic_block(port: u16, c: [u64; 12]) -> String {
        let [rp, rm, rb, re, rn, tp, te, tb, rpps, rbps, tpps, tbps] = c;
        format!(
            "  ######################## NIC statistics for port {port}  ########################
  RX-packets: {rp:<11}RX-missed: {rm:<11}RX-bytes:  {rb}
  RX-errors: {re}
  RX-nombuf:  {rn:<10}
  TX-packets: {tp:<11}TX-errors: {te:<11}TX-bytes:  {tb}

  Throughput (since last show)
  Rx-pps: {rpps:>12}          Rx-bps: {rbps:>12}
  Tx-pps: {tpps:>12}          Tx-bps: {tbps:>12}
  ############################################################################
"
        )
    }

    #[test]
    fn parses_core_cycles() {
        let out = "  ---------------------- Forward statistics for port 0  ----------------------\n\
                   \n  CPU cycles/packet=212.37 (total cycles=2123700000 / total RX packets=10000000) at 2400 MHz Clock\n";
        let c = parse_core_cycles(out).unwrap();
        assert_eq!(
            c,
            CoreCycles {
                cycles: 2_123_700_000,
                packets: 10_000_000,
                mhz: 2400
            }
        );
        let w = c.since(&CoreCycles {
            cycles: 123_700_000,
            packets: 0,
            mhz: 2400,
        });
        assert_eq!(w.per_packet(), Some(200.0));
        assert_eq!(w.fraction_of(Duration::from_secs(1)), Some(2e9 / 2.4e9));
        assert_eq!(parse_core_cycles("no such line"), None);
    }

    /// The output of `show port stats all` for two ports.
    fn port_stats_text() -> String {
        format!(
            "show port stats all\n\n{}\n{}",
            nic_block(
                0,
                [
                    1234,
                    5,
                    78976,
                    6,
                    7,
                    512,
                    8,
                    32768,
                    9_999_999,
                    5_119_999_488,
                    3,
                    4
                ]
            ),
            nic_block(1, [1, 0, 64, 0, 0, 2, 0, 128, 1, 0, 0, 0])
        )
    }

    #[test]
    fn parses_port_stats() {
        let s = parse_port_stats(&port_stats_text());
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            PortStats {
                port: 0,
                rx_packets: 1234,
                rx_missed: 5,
                rx_bytes: 78976,
                rx_errors: 6,
                rx_nombuf: 7,
                tx_packets: 512,
                tx_errors: 8,
                tx_bytes: 32768,
                rx_pps: 9_999_999,
                rx_bps: 5_119_999_488,
                tx_pps: 3,
                tx_bps: 4,
            }
        );
        assert_eq!(s[1].port, 1);
        assert_eq!(s[1].tx_bytes, 128);
        let t = sum_port_stats(&s);
        assert_eq!(
            (t.rx_packets, t.tx_packets, t.rx_pps),
            (1235, 514, 10_000_000)
        );
    }

    const STOP: &str = "stop
Telling cores to stop...
Waiting for lcores to finish...

  ------- Forward Stats for RX Port= 0/Queue= 0 -> TX Port= 0/Queue= 0 -------
  RX-packets: 10             TX-packets: 256            TX-dropped: 768           

  ------- Forward Stats for RX Port= 0/Queue= 1 -> TX Port= 0/Queue= 1 -------
  RX-packets: 20             TX-packets: 250            TX-dropped: 6           

  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 30             RX-dropped: 1             RX-total: 31
  TX-packets: 506            TX-dropped: 774           TX-total: 1280
  ----------------------------------------------------------------------------

  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 30             RX-dropped: 1             RX-total: 31
  TX-packets: 506            TX-dropped: 774           TX-total: 1280
  ++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++

Done.
";

    #[test]
    fn parses_fwd_stats() {
        let f = parse_fwd_stats(STOP);
        assert_eq!(f.streams.len(), 2);
        assert_eq!(
            f.stream(0, 1),
            Some(&StreamStats {
                rx_port: 0,
                rx_queue: 1,
                tx_port: 0,
                tx_queue: 1,
                rx_packets: 20,
                tx_packets: 250,
                tx_dropped: 6,
            })
        );
        assert_eq!(f.ports.len(), 1);
        assert_eq!(
            f.ports[0],
            PortFwdStats {
                port: 0,
                rx_packets: 30,
                rx_dropped: 1,
                rx_total: 31,
                tx_packets: 506,
                tx_dropped: 774,
                tx_total: 1280,
            }
        );
        assert_eq!(f.total.tx_total, 1280);
        assert_eq!(f.total.port, u16::MAX);
        assert!(parse_fwd_stats("Packet forwarding not started\n")
            .streams
            .is_empty());
    }
}

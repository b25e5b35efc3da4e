// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The Python programs the end-to-end tests run on the peer side, one file each under
//! `tests/peers/` (each starts with a docstring: what it does, its arguments). They are
//! compiled in and run with `python3 -c` (see [`crate::netns::Netns::spawn_python`]),
//! or through [`LineOutput`] when a test reads their output line by line.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

/// Captures a number of frames of one EtherType and prints each as hex.
///
/// `tests/peers/capture_count.py`.
pub const CAPTURE_COUNT: &str = include_str!("../peers/capture_count.py");

/// Captures frames of one EtherType on an interface and prints each as hex.
///
/// `tests/peers/capture_frames.py`.
pub const CAPTURE_FRAMES: &str = include_str!("../peers/capture_frames.py");

/// Legacy ethtool "set" commands through SIOCETHTOOL (no ethtool binary needed).
///
/// `tests/peers/ethtool.py`.
pub const ETHTOOL: &str = include_str!("../peers/ethtool.py");

/// Floods an interface with numbered broadcast frames.
///
/// `tests/peers/flood.py`.
pub const FLOOD: &str = include_str!("../peers/flood.py");

/// The guest's peers in the namespace, for the patch guest tests.
///
/// `tests/peers/guest_peer.py`.
pub const GUEST_PEER: &str = include_str!("../peers/guest_peer.py");

/// Sends 64-byte IPv4/UDP frames round-robin over many flows (a source MAC
/// and UDP port per flow): `IFNAME COUNT FLOWS SRC_PREFIX DST_MAC`.
///
/// `tests/peers/send_flows.py`.
pub const SEND_FLOWS: &str = include_str!("../peers/send_flows.py");

/// Sends raw Ethernet frames on an interface.
///
/// `tests/peers/send_frames.py`.
pub const SEND_FRAMES: &str = include_str!("../peers/send_frames.py");

/// TCP client: sends a byte pattern, then prints what comes back.
///
/// `tests/peers/tcp_client.py`.
pub const TCP_CLIENT: &str = include_str!("../peers/tcp_client.py");

/// Sends a byte pattern over one TCP connection.
///
/// `tests/peers/tcp_send.py`.
pub const TCP_SEND: &str = include_str!("../peers/tcp_send.py");

/// Sends one Ethernet/IPv4/UDP frame whose UDP checksum is wrong.
///
/// `tests/peers/udp_bad_csum.py`.
pub const UDP_BAD_CSUM: &str = include_str!("../peers/udp_bad_csum.py");

/// Counts UDP datagrams and their payload lengths.
///
/// `tests/peers/udp_count.py`.
pub const UDP_COUNT: &str = include_str!("../peers/udp_count.py");

/// UDP server that echoes each datagram back reversed.
///
/// `tests/peers/udp_echo.py`.
pub const UDP_ECHO: &str = include_str!("../peers/udp_echo.py");

/// A peer-side program whose stdout lines arrive on a channel, read by a
/// thread of its own; the process is killed when this is dropped (only
/// reached with it still running when a test failed).
#[derive(Debug)]
pub struct LineOutput {
    child: Child,
    lines: Receiver<String>,
}

impl LineOutput {
    /// Starts `cmd` with its stdout piped to the line channel.
    ///
    /// # Panics
    ///
    /// If it cannot be started (`what` names it in the message).
    pub fn spawn(cmd: &mut Command, what: &str) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line, waiting up to `timeout`.
    ///
    /// # Panics
    ///
    /// If none comes in time (`what` names the line in the message).
    pub fn line(&self, timeout: Duration, what: &str) -> String {
        self.lines
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("{what}: {e:?}"))
    }

    /// The next line if one has arrived.
    pub fn try_line(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Waits for the program to exit; whether it exited 0.
    ///
    /// # Panics
    ///
    /// If waiting fails.
    pub fn wait_success(&mut self) -> bool {
        self.child.wait().expect("exit").success()
    }
}

impl Drop for LineOutput {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

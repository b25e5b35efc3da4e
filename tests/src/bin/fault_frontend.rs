// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A vhost-user frontend in a process of its own, for the fault tests to
//! SIGKILL at a chosen point: the library's in-process driver
//! (`TestDriver`) connected to a backend's socket.
//!
//! ```text
//! fault-frontend SOCKET STOP [DST_MAC]
//! ```
//!
//! The bring-up counts its steps (`CONNECT`, then each request: see
//! `DriverOpts::after_request`). At step `STOP` (from 0) the process prints
//! `stopped after NAME (STOP)` and waits, holding every fd and its guest
//! memory, to be killed. With `STOP` past the last step it prints
//! `up after N steps`, posts RX buffers and sends frames to `DST_MAC`
//! (default broadcast) without end, printing `sending` once the first
//! burst is queued. It never exits by itself unless the bring-up fails
//! (exit 1, the error on stderr).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use vhost_net_backend::test_utils::{DriverError, DriverOpts, RxLayout, TestDriver, TxLayout};

/// The step to stop at.
static STOP: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Steps taken so far.
static STEPS: AtomicUsize = AtomicUsize::new(0);

fn step(name: &'static str) {
    let n = STEPS.fetch_add(1, Ordering::SeqCst);
    if n == STOP.load(Ordering::SeqCst) {
        println!("stopped after {name} ({n})");
        let _ = std::io::stdout().flush();
        loop {
            thread::park();
        }
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: fault-frontend SOCKET STOP [DST_MAC]");
        std::process::exit(2)
    };
    if args.len() < 3 || args.len() > 4 {
        usage();
    }
    let socket = PathBuf::from(&args[1]);
    let Ok(stop) = args[2].parse::<usize>() else {
        usage()
    };
    let dst = match args.get(3) {
        Some(m) => parse_mac(m).unwrap_or_else(|| usage()),
        None => [0xff; 6],
    };
    STOP.store(stop, Ordering::SeqCst);
    let opts = DriverOpts {
        after_request: Some(step),
        ..DriverOpts::default()
    };
    let mut d = match TestDriver::connect(&socket, opts) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fault-frontend: bring-up over {}: {e}", socket.display());
            std::process::exit(1);
        }
    };
    println!("up after {} steps", STEPS.load(Ordering::SeqCst));
    if let Err(e) = d.post_rx_buffers(0, 64, 2048, RxLayout::Single) {
        eprintln!("fault-frontend: RX buffers: {e}");
        std::process::exit(1);
    }
    d.kick_rx(0);
    let hdr = d.zero_hdr();
    let mut frame = vec![0u8; 128];
    frame[..6].copy_from_slice(&dst);
    frame[6..12].copy_from_slice(&[0x02, 0, 0, 0xfa, 0xff, 0x01]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    let mut told = false;
    for seq in 0u64.. {
        frame[14..22].copy_from_slice(&seq.to_le_bytes());
        loop {
            match d.send_frame(0, &hdr, &frame, TxLayout::Single) {
                Ok(_) => break,
                Err(DriverError::RingFull { .. } | DriverError::OutOfMemory(_)) => {
                    d.kick_tx(0);
                    if !told {
                        println!("sending");
                        let _ = std::io::stdout().flush();
                        told = true;
                    }
                    thread::sleep(Duration::from_micros(100));
                    d.tx_completions(0);
                    // Take what arrives too, so the RX ring keeps moving.
                    let n = d.recv_frames(0).len();
                    if n > 0 && d.post_rx_buffers(0, n, 2048, RxLayout::Single).is_ok() {
                        d.kick_rx(0);
                    }
                }
                Err(e) => {
                    eprintln!("fault-frontend: send: {e}");
                    std::process::exit(1);
                }
            }
        }
        if seq % 32 == 31 {
            d.kick_tx(0);
        }
    }
}

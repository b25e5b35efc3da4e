// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Packet capture on a port: `GET /ports/{name}/capture` and
//! `vhuctl capture`.
//!
//! * **Cost when off**: one relaxed load per burst ([`CaptureTap::on`]).
//! * **When on**, the PMD copies each frame crossing the port (up to
//!   [`SNAPLEN`] bytes) into a bounded lock-free queue; the API thread drains
//!   it into the HTTP stream. A full queue drops the copy, never the frame,
//!   and counts it. One capture per port at a time.
//! * **Format**: pcapng (which tcpdump and Wireshark read, `tcpdump -r -`),
//!   because it marks each frame's direction (the Enhanced Packet Block's
//!   `epb_flags`): *inbound* is a frame that came from the port into the
//!   switch, *outbound* one the switch delivered through the port, as on a
//!   switch interface. Timestamps in microseconds.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam_queue::ArrayQueue;

/// Bytes kept of each frame (super-frames are cut; their length is kept).
pub const SNAPLEN: usize = 16 * 1024;
/// Frames buffered between the PMD and the API thread.
pub const QUEUE_LEN: usize = 1024;

/// Which way a frame crossed the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the port into the switch.
    Inbound,
    /// From the switch out through the port.
    Outbound,
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Microseconds since the Unix epoch.
    pub ts_us: u64,
    /// Direction.
    pub dir: Direction,
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// Its first bytes (at most [`SNAPLEN`]).
    pub data: Vec<u8>,
}

/// A port's capture point, shared by the PMD (producer) and the API
/// (consumer).
#[derive(Debug)]
pub struct CaptureTap {
    active: AtomicBool,
    queue: ArrayQueue<Record>,
    dropped: AtomicU64,
}

impl Default for CaptureTap {
    fn default() -> Self {
        Self {
            active: AtomicBool::new(false),
            queue: ArrayQueue::new(QUEUE_LEN),
            dropped: AtomicU64::new(0),
        }
    }
}

impl CaptureTap {
    /// Whether a capture runs. Read once per burst.
    #[inline]
    pub fn on(&self) -> bool {
        // Relaxed: a burst that misses the switch-on by a few frames is
        // fine; nothing else is ordered by it.
        self.active.load(Ordering::Relaxed)
    }

    /// Starts a capture; `false` if one already runs.
    pub fn start(&self) -> bool {
        let started = self
            .active
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if started {
            while self.queue.pop().is_some() {}
            self.dropped.store(0, Ordering::Relaxed);
        }
        started
    }

    /// Stops the capture.
    pub fn stop(&self) {
        self.active.store(false, Ordering::Release);
    }

    /// Records a frame (capture on only). `copy` fills the buffer with the
    /// frame's first bytes and returns how many it wrote.
    pub fn offer(&self, dir: Direction, len: usize, copy: impl FnOnce(&mut [u8]) -> usize) {
        if self.queue.is_full() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Capture is a debugging path: one allocation per captured frame.
        let mut data = vec![0u8; len.min(SNAPLEN)];
        let n = copy(&mut data);
        data.truncate(n);
        let rec = Record {
            ts_us: now_us(),
            dir,
            orig_len: u32::try_from(len).unwrap_or(u32::MAX),
            data,
        };
        if self.queue.push(rec).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The next captured frame, if any.
    pub fn take(&self) -> Option<Record> {
        self.queue.pop()
    }

    /// Copies lost because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Block type of the Section Header Block (pcapng 4.1).
const SHB: u32 = 0x0a0d_0d0a;
/// Block type of an Interface Description Block (4.2).
const IDB: u32 = 0x0000_0001;
/// Block type of an Enhanced Packet Block (4.3).
const EPB: u32 = 0x0000_0006;
/// Written in the writer's byte order: readers learn it from this.
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// The interface's link type: Ethernet frames.
const LINKTYPE_ETHERNET: u16 = 1;
/// Option code ending an option list.
const OPT_END: u16 = 0;
/// Option code of an interface's name (the port's).
const IF_NAME: u16 = 2;
/// Option code of an Enhanced Packet Block's flags (bits 0-1: direction).
const EPB_FLAGS: u16 = 2;

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

fn block(w: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<()> {
    let total = u32::try_from(12 + body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "block too large"))?;
    w.write_all(&kind.to_le_bytes())?;
    w.write_all(&total.to_le_bytes())?;
    w.write_all(body)?;
    w.write_all(&total.to_le_bytes())
}

fn option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    body.extend_from_slice(value);
    body.resize(pad4(body.len()), 0);
}

/// Writes the section header and one interface (the port) description.
///
/// # Errors
/// The writer failed.
pub fn write_header(w: &mut impl Write, port: &str) -> io::Result<()> {
    let mut shb = Vec::with_capacity(16);
    shb.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(w, SHB, &shb)?;
    let mut idb = Vec::with_capacity(32);
    idb.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&(SNAPLEN as u32).to_le_bytes());
    let name = &port.as_bytes()[..port.len().min(255)];
    option(&mut idb, IF_NAME, name);
    option(&mut idb, OPT_END, &[]);
    block(w, IDB, &idb)
}

/// Writes one captured frame.
///
/// # Errors
/// The writer failed.
pub fn write_record(w: &mut impl Write, r: &Record) -> io::Result<()> {
    let mut epb = Vec::with_capacity(32 + pad4(r.data.len()));
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&((r.ts_us >> 32) as u32).to_le_bytes());
    epb.extend_from_slice(&(r.ts_us as u32).to_le_bytes());
    epb.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
    epb.extend_from_slice(&r.orig_len.to_le_bytes());
    epb.extend_from_slice(&r.data);
    epb.resize(pad4(epb.len()), 0);
    let flags: u32 = match r.dir {
        Direction::Inbound => 1,
        Direction::Outbound => 2,
    };
    option(&mut epb, EPB_FLAGS, &flags.to_le_bytes());
    option(&mut epb, OPT_END, &[]);
    block(w, EPB, &epb)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn tap_is_bounded_and_exclusive() {
        let t = CaptureTap::default();
        assert!(!t.on());
        assert!(t.start());
        assert!(!t.start(), "one capture at a time");
        for i in 0..QUEUE_LEN + 5 {
            t.offer(Direction::Inbound, 60, |b| {
                b[0] = i as u8;
                60
            });
        }
        assert_eq!(t.dropped(), 5);
        assert_eq!(t.take().unwrap().data[0], 0);
        t.offer(Direction::Outbound, 100_000, |b| b.len());
        t.stop();
        assert!(!t.on());
        assert!(t.start());
        assert!(t.take().is_none(), "a new capture starts empty");
        assert_eq!(t.dropped(), 0);
    }

    #[test]
    fn pcapng_blocks_are_well_formed() {
        let mut out = Vec::new();
        write_header(&mut out, "vm1").unwrap();
        let frame: Vec<u8> = (0..61u8).collect();
        let rec = Record {
            ts_us: 0x1_0000_0002,
            dir: Direction::Outbound,
            orig_len: 61,
            data: frame.clone(),
        };
        write_record(&mut out, &rec).unwrap();
        // Walk the blocks: each total length repeated at its end, 4-aligned.
        let mut off = 0;
        let mut kinds = Vec::new();
        while off < out.len() {
            let kind = u32_at(&out, off);
            let len = u32_at(&out, off + 4) as usize;
            assert_eq!(len % 4, 0);
            assert_eq!(u32_at(&out, off + len - 4) as usize, len);
            kinds.push(kind);
            if kind == EPB {
                let b = &out[off + 8..off + len - 4];
                assert_eq!(u32_at(b, 4), 1, "timestamp high");
                assert_eq!(u32_at(b, 8), 2, "timestamp low");
                assert_eq!(u32_at(b, 12), 61);
                assert_eq!(&b[20..81], &frame[..]);
                // epb_flags after the padded data: outbound = 2.
                assert_eq!(u16::from_le_bytes([b[84], b[85]]), EPB_FLAGS);
                assert_eq!(u32_at(b, 88), 2);
            }
            off += len;
        }
        assert_eq!(kinds, [SHB, IDB, EPB]);
        assert_eq!(u32_at(&out, 8), BYTE_ORDER_MAGIC);
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The driver side of one RX and one TX ring in anonymous memory of this
//! process: the raw descriptor, avail and used accesses a guest double
//! makes, behind a small safe API, so the double
//! ([`LoopbackGuest`](crate::test_utils::LoopbackGuest)) holds no `unsafe`.
//! Test-only (feature `test-utils`).
//!
//! Each ring has a fixed buffer per descriptor slot: TX buffer `i` holds the
//! `i`-th posted frame (header + bytes), RX buffer `i` is `buf_len` bytes.
//! Posting writes descriptors and publishes them (split: avail entries and
//! one release store of `avail.idx`; packed: descriptors with the head's
//! flags stored last); reaping reads the used side back. It is a driver as
//! simple as possible, not a validating one: the ring tests and the
//! in-process driver (`test_utils`) check protocol details.
#![cfg(feature = "test-utils")]

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use super::flags::{DESC_F_AVAIL as AVAIL, DESC_F_USED as USED, DESC_F_WRITE as WRITE};
use super::memory::GuestMemory;
use super::{Layout, PackedLayout, SplitLayout};

#[derive(Debug)]
struct DrvRing {
    packed: bool,
    size: u16,
    desc: usize,
    avail: usize,
    used: usize,
    bufs: usize,
    buf_len: usize,
    /// Split: next avail index. Packed: next slot + wrap.
    next: u16,
    wrap: bool,
    /// Reaping position (split: last used idx seen; packed: next used slot).
    reap: u16,
    reap_wrap: bool,
    /// Buffers outstanding (posted, not reaped).
    outstanding: u16,
}

/// Both rings of a loopback guest and the memory they live in.
#[derive(Debug)]
pub(crate) struct DriverRings {
    mem: Arc<GuestMemory>,
    rx: DrvRing,
    tx: DrvRing,
    len: u64,
}

/// Guest-physical start of a loopback guest's memory.
pub(crate) const GPA: u64 = 0x1_0000_0000;

impl DriverRings {
    /// Lays out both rings and their buffers (`rx_len` and `tx_len` bytes
    /// per slot) in fresh anonymous memory.
    ///
    /// # Panics
    /// On an invalid layout (size 0, a split size that is not a power of
    /// two, a buffer shorter than 64 bytes).
    pub(crate) fn new(packed: bool, size: u16, rx_len: u32, tx_len: u32) -> Self {
        assert!(size > 0 && (packed || size.is_power_of_two()));
        assert!(tx_len >= 64 && rx_len >= 64);
        let n = usize::from(size);
        let ring_bytes = (16 * n + 4096 + 8 * n + 4096).next_multiple_of(4096);
        let rx_bytes = n * rx_len as usize;
        let tx_bytes = n * tx_len as usize;
        let total = 2 * ring_bytes + rx_bytes + tx_bytes;
        let mem = Arc::new(GuestMemory::anonymous(&[(GPA, total)]));
        let mut hint = 0;
        let base = mem
            .translate(GPA, total as u64, &mut hint)
            .expect("loopback memory");
        let mk = |off: usize, buf_len: u32| {
            let desc = base + off;
            let avail = desc + 16 * n;
            let used = (avail + 6 + 2 * n).next_multiple_of(4096);
            DrvRing {
                packed,
                size,
                desc,
                avail,
                used,
                bufs: base + off + ring_bytes,
                buf_len: buf_len as usize,
                next: 0,
                wrap: true,
                reap: 0,
                reap_wrap: true,
                outstanding: 0,
            }
        };
        let d = Self {
            rx: mk(0, rx_len),
            tx: mk(ring_bytes + rx_bytes, tx_len),
            mem,
            len: total as u64,
        };
        // Descriptor i always points at buffer i (split); packed descriptors
        // are written at post time.
        if !packed {
            for i in 0..size {
                let rx_at = d.gpa(d.rx.bufs + usize::from(i) * d.rx.buf_len);
                let tx_at = d.gpa(d.tx.bufs + usize::from(i) * d.tx.buf_len);
                write_desc(d.rx.desc, i, rx_at, rx_len, WRITE, 0);
                write_desc(d.tx.desc, i, tx_at, tx_len, 0, 0);
            }
        }
        d
    }

    /// The memory both rings live in.
    pub(crate) fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// Guest-physical layout of the RX ring (`rx == true`) or TX ring.
    pub(crate) fn layout(&self, rx: bool) -> Layout {
        let r = if rx { &self.rx } else { &self.tx };
        let (desc, avail, used) = (self.gpa(r.desc), self.gpa(r.avail), self.gpa(r.used));
        if r.packed {
            Layout::Packed(PackedLayout {
                desc,
                driver: avail,
                device: used,
                size: r.size,
            })
        } else {
            Layout::Split(SplitLayout {
                desc,
                avail,
                used,
                size: r.size,
            })
        }
    }

    /// Guest-physical address of the used ring (split) or device event
    /// area (packed) of the RX or TX ring.
    pub(crate) fn used_gpa(&self, rx: bool) -> u64 {
        self.gpa(if rx { self.rx.used } else { self.tx.used })
    }

    /// Guest-physical address of buffer `i` of the RX or TX ring.
    pub(crate) fn buffer_gpa(&self, rx: bool, i: u16) -> u64 {
        let r = if rx { &self.rx } else { &self.tx };
        self.gpa(r.bufs + usize::from(i) * r.buf_len)
    }

    /// Guest memory: its guest-physical start and length (one region).
    pub(crate) fn memory_range(&self) -> (u64, u64) {
        (GPA, self.len)
    }

    /// Writes raw bytes at a guest-physical address.
    ///
    /// # Panics
    /// When the range is outside guest memory.
    pub(crate) fn write_guest(&self, gpa: u64, bytes: &[u8]) {
        write_bytes(self.hva(gpa, bytes.len(), "write"), bytes);
    }

    /// Reads raw bytes at a guest-physical address.
    ///
    /// # Panics
    /// When the range is outside guest memory.
    pub(crate) fn read_guest(&self, gpa: u64, out: &mut [u8]) {
        read_bytes(self.hva(gpa, out.len(), "read"), out);
    }

    /// The host address of guest-physical `gpa..gpa + len`; panics (naming
    /// the `access`) when that is outside guest memory.
    fn hva(&self, gpa: u64, len: usize, access: &str) -> usize {
        let mut hint = 0;
        self.mem
            .translate(gpa, len as u64, &mut hint)
            .unwrap_or_else(|| panic!("{access} inside guest memory"))
    }

    fn gpa(&self, hva: usize) -> u64 {
        let mut hint = 0;
        let base = self.mem.translate(GPA, 0, &mut hint).expect("base");
        GPA + (hva - base) as u64
    }

    /// Posts up to `n` copies of `frame` behind a zero header of `hdr_len`
    /// bytes on the TX ring; returns how many were posted (limited by free
    /// slots).
    ///
    /// # Panics
    /// When a header and the frame do not fit a TX buffer.
    pub(crate) fn post_tx(&mut self, hdr_len: usize, frame: &[u8], n: usize) -> usize {
        let len = hdr_len + frame.len();
        assert!(len <= self.tx.buf_len, "frame larger than the TX buffers");
        assert!(hdr_len <= 12, "a virtio-net header is at most 12 bytes");
        let free = usize::from(self.tx.size - self.tx.outstanding);
        let n = n.min(free);
        for _ in 0..n {
            let slot = self.tx.slot();
            let buf = self.tx.bufs + usize::from(slot) * self.tx.buf_len;
            write_bytes(buf, &[0u8; 12][..hdr_len]);
            write_bytes(buf + hdr_len, frame);
            if self.tx.packed {
                let gpa = self.gpa(buf);
                self.tx.post_packed(gpa, len as u32, 0, slot);
            } else {
                self.tx.post_split_entry(slot, len as u32);
            }
        }
        self.tx.publish_split();
        n
    }

    /// Makes up to `n` RX buffers available; returns how many.
    pub(crate) fn post_rx(&mut self, n: usize) -> usize {
        let free = usize::from(self.rx.size - self.rx.outstanding);
        let n = n.min(free);
        for _ in 0..n {
            let slot = self.rx.slot();
            if self.rx.packed {
                let buf = self.rx.bufs + usize::from(slot) * self.rx.buf_len;
                let gpa = self.gpa(buf);
                self.rx
                    .post_packed(gpa, self.rx.buf_len as u32, WRITE, slot);
            } else {
                self.rx.post_split_entry(slot, self.rx.buf_len as u32);
            }
        }
        self.rx.publish_split();
        n
    }

    /// Consumes used TX entries; returns how many buffers came back.
    pub(crate) fn reap_tx(&mut self) -> usize {
        self.tx.reap(&mut |_, _| {})
    }

    /// Consumes used RX entries; returns (buffers, bytes written).
    pub(crate) fn reap_rx(&mut self) -> (usize, u64) {
        let mut bytes = 0u64;
        let n = self.rx.reap(&mut |_, len| bytes += u64::from(len));
        (n, bytes)
    }

    /// Consumes used RX entries, calling `f` with each buffer's contents
    /// (virtio-net header included).
    pub(crate) fn reap_rx_with(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        let bufs = self.rx.bufs;
        let blen = self.rx.buf_len;
        self.rx.reap(&mut |id, len| {
            let len = (len as usize).min(blen);
            let mut v = vec![0u8; len];
            read_bytes(bufs + usize::from(id) * blen, &mut v);
            f(&v);
        })
    }
}

impl DrvRing {
    /// The slot (split: descriptor id; packed: ring slot and buffer id) for
    /// the next post. Buffers are used in order, so slot = next % size.
    fn slot(&self) -> u16 {
        if self.packed {
            self.next
        } else {
            self.next & (self.size - 1)
        }
    }

    fn post_split_entry(&mut self, id: u16, len: u32) {
        // Refresh the length (TX frames vary).
        let d = self.desc + 16 * usize::from(id) + 8;
        // SAFETY: `id < size`: inside the descriptor table in loopback
        // memory owned by `self`'s guest.
        unsafe { std::ptr::write_volatile(d as *mut u32, len.to_le()) };
        let slot = usize::from(self.next & (self.size - 1));
        write_u16(self.avail + 4 + 2 * slot, id);
        self.next = self.next.wrapping_add(1);
        self.outstanding += 1;
    }

    fn publish_split(&mut self) {
        if !self.packed {
            // SAFETY: `avail + 2` is the 2-aligned avail.idx field inside
            // loopback memory.
            let idx = unsafe { &*((self.avail + 2) as *const AtomicU16) };
            idx.store(self.next, Ordering::Release);
        }
    }

    fn post_packed(&mut self, gpa: u64, len: u32, flags: u16, id: u16) {
        let f = flags | if self.wrap { AVAIL } else { USED };
        let p = self.desc + 16 * usize::from(self.next);
        // SAFETY: slot `next < size` of the descriptor ring in loopback
        // memory; 8-aligned. The flags are stored last, below.
        unsafe {
            std::ptr::write_volatile(p as *mut u64, gpa.to_le());
            std::ptr::write_volatile((p + 8) as *mut u32, len.to_le());
            std::ptr::write_volatile((p + 12) as *mut u16, id.to_le());
        }
        // SAFETY: the flags field of slot `next < size`, 2-aligned.
        let fl = unsafe { &*((self.desc + 16 * usize::from(self.next) + 14) as *const AtomicU16) };
        fl.store(f, Ordering::Release);
        self.next += 1;
        if self.next == self.size {
            self.next = 0;
            self.wrap = !self.wrap;
        }
        self.outstanding += 1;
    }

    fn reap(&mut self, f: &mut dyn FnMut(u16, u32)) -> usize {
        let mut n = 0;
        if self.packed {
            loop {
                let p = self.desc + 16 * usize::from(self.reap);
                // SAFETY: slot `reap < size` inside loopback memory.
                let fl = unsafe { &*((p + 14) as *const AtomicU16) }.load(Ordering::Acquire);
                let used =
                    (fl & USED != 0) == self.reap_wrap && (fl & AVAIL != 0) == self.reap_wrap;
                if !used || self.outstanding == 0 {
                    break;
                }
                // SAFETY: as above.
                let (len, id) = unsafe {
                    (
                        u32::from_le(std::ptr::read_volatile((p + 8) as *const u32)),
                        u16::from_le(std::ptr::read_volatile((p + 12) as *const u16)),
                    )
                };
                // Every buffer takes one slot and has its slot as id, so a
                // used descriptor whose id is a later slot returns the run
                // of buffers up to it (IN_ORDER, TX).
                let run = (id + self.size - self.reap) % self.size + 1;
                assert!(
                    id < self.size && run <= self.outstanding,
                    "device returned id {id} at slot {} with {} outstanding",
                    self.reap,
                    self.outstanding
                );
                for k in 0..run {
                    f(self.reap, if k + 1 == run { len } else { 0 });
                    self.reap += 1;
                    if self.reap == self.size {
                        self.reap = 0;
                        self.reap_wrap = !self.reap_wrap;
                    }
                }
                self.outstanding -= run;
                n += usize::from(run);
            }
        } else {
            // SAFETY: used.idx, 2-aligned, inside loopback memory.
            let idx = unsafe { &*((self.used + 2) as *const AtomicU16) }.load(Ordering::Acquire);
            while self.reap != idx {
                let e = self.used + 4 + 8 * usize::from(self.reap & (self.size - 1));
                // SAFETY: a used element inside the used ring.
                let (id, len) = unsafe {
                    (
                        u32::from_le(std::ptr::read_volatile(e as *const u32)),
                        u32::from_le(std::ptr::read_volatile((e + 4) as *const u32)),
                    )
                };
                f(id as u16, len);
                self.reap = self.reap.wrapping_add(1);
                self.outstanding -= 1;
                n += 1;
            }
        }
        n
    }
}

fn write_desc(table: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
    let p = table + 16 * usize::from(i);
    // SAFETY: callers pass a slot inside a descriptor table in loopback
    // memory; 8-aligned.
    unsafe {
        std::ptr::write_volatile(p as *mut u64, addr.to_le());
        std::ptr::write_volatile((p + 8) as *mut u32, len.to_le());
        std::ptr::write_volatile((p + 12) as *mut u16, flags.to_le());
        std::ptr::write_volatile((p + 14) as *mut u16, next.to_le());
    }
}

fn write_u16(addr: usize, v: u16) {
    // SAFETY: callers pass a 2-aligned field inside loopback memory.
    unsafe { std::ptr::write_volatile(addr as *mut u16, v.to_le()) }
}

fn write_bytes(addr: usize, b: &[u8]) {
    // SAFETY: callers pass a buffer inside loopback memory with room for
    // `b` (checked against buf_len).
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), addr as *mut u8, b.len()) }
}

fn read_bytes(addr: usize, b: &mut [u8]) {
    // SAFETY: as in `write_bytes`.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, b.as_mut_ptr(), b.len()) }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The hostile driver and the checks: decodes operations into ring writes
//! and device calls, runs each on the engine and on the model, and asserts
//! they agree.

use super::model::*;
use super::*;

// ===== the hostile driver and the checks =====

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Drv {
    /// Split: next descriptor index to use for a well-formed chain.
    pub(super) next_desc: u16,
    /// Packed: next slot to post at, and the driver's wrap counter.
    pub(super) pk_next: u16,
    pub(super) pk_wrap: bool,
}

pub(super) struct Harness {
    pub(super) g: LoopbackGuest,
    pub(super) c: Cfg,
    pub(super) base: u64,
    pub(super) len: u64,
    /// 0: RX, 1: TX.
    pub(super) dev: [Dev; 2],
    pub(super) drv: [Drv; 2],
    pub(super) pattern: Vec<u8>,
}

pub(super) const fn side(rx: bool) -> usize {
    if rx {
        0
    } else {
        1
    }
}

impl Harness {
    pub(super) fn new(inp: &mut Input<'_>) -> Self {
        let cb = inp.u8();
        let packed = cb & cfg::PACKED != 0;
        let sb = inp.u8();
        let size = if packed {
            1 + u16::from(sb)
        } else {
            1u16 << (sb % 9)
        };
        let mut buf_len: u32 = [64, 128, 256, 512, 1024, 2048, 4096][usize::from(inp.u8() % 7)];
        // Keep guest memory small: the oracle compares all of it after
        // every device operation.
        while u32::from(size) * buf_len > 128 * 1024 && buf_len > 64 {
            buf_len /= 2;
        }
        let mut features = 0;
        if cb & cfg::EVENT_IDX != 0 {
            features |= bits::EVENT_IDX;
        }
        if cb & cfg::INDIRECT != 0 {
            features |= bits::INDIRECT_DESC;
        }
        if cb & cfg::MRG != 0 {
            features |= bits::MRG_RXBUF;
        }
        if cb & cfg::IN_ORDER != 0 {
            features |= bits::IN_ORDER;
        }
        if cb & cfg::OFFLOADS != 0 {
            features |= bits::GUEST_CSUM
                | bits::GUEST_TSO4
                | bits::GUEST_TSO6
                | bits::GUEST_UFO
                | bits::GUEST_ECN;
        }
        let g = LoopbackGuest::new(LoopbackOpts {
            packed,
            size,
            features,
            buf_len,
            rx_buf_len: None,
        });
        let mut acked = features | bits::VERSION_1;
        if packed {
            acked |= bits::RING_PACKED;
        }
        let c = Cfg {
            packed,
            size,
            buf_len,
            features: acked,
            hdr_len: g.hdr_len(),
            event_idx: cb & cfg::EVENT_IDX != 0,
            indirect: cb & cfg::INDIRECT != 0,
            mrg: cb & cfg::MRG != 0,
        };
        let (base, len) = g.memory_range();
        let dev = [
            Dev::new(g.layout(true), true, cb & cfg::IN_ORDER != 0),
            Dev::new(g.layout(false), false, cb & cfg::IN_ORDER != 0),
        ];
        let drv = [Drv {
            pk_wrap: true,
            ..Drv::default()
        }; 2];
        let pattern = (0..MAX_FRAME_LEN + 512)
            .map(|i| (i as u32).wrapping_mul(0x9e37_79b1).rotate_left(7) as u8)
            .collect();
        Self {
            g,
            c,
            base,
            len,
            dev,
            drv,
            pattern,
        }
    }

    pub(super) fn step(&mut self, inp: &mut Input<'_>) {
        let code = inp.u8() % op::COUNT;
        if trace() {
            eprintln!("op {} ({})", code, OP_NAMES[usize::from(code)]);
        }
        match code {
            op::POST_TX => self.op_post(inp, false),
            op::POST_RX => self.op_post(inp, true),
            op::RAW_DESC => self.op_raw_desc(inp),
            op::INDIRECT => self.op_indirect(inp),
            op::AVAIL => self.op_avail(inp),
            op::TX_BURST => self.op_tx_burst(inp),
            op::RX_BURST => self.op_rx_burst(inp),
            op::ECHO => self.op_echo(inp),
            op::NOTIFY => self.op_notify(inp),
            op::RAW_BYTES => self.op_raw_bytes(inp),
            _ => self.op_query(inp),
        }
    }

    // ----- memory access -----

    pub(super) fn snapshot(&self) -> Mem {
        let mut b = vec![0u8; self.len as usize];
        self.g.read_guest(self.base, &mut b);
        Mem { base: self.base, b }
    }

    pub(super) fn write(&self, gpa: u64, bytes: &[u8]) {
        self.g.write_guest(gpa, bytes);
    }

    pub(super) fn r16(&self, gpa: u64) -> u16 {
        let mut b = [0u8; 2];
        self.g.read_guest(gpa, &mut b);
        u16::from_le_bytes(b)
    }

    /// Names the area holding `gpa`, for failure messages.
    pub(super) fn describe(&self, gpa: u64) -> String {
        let n = u64::from(self.c.size);
        let bl = u64::from(self.c.buf_len);
        for rx in [true, false] {
            let s = if rx { "RX" } else { "TX" };
            let areas: [(&str, u64, u64); 3] = match self.g.layout(rx) {
                Layout::Split(l) => [
                    ("desc table", l.desc, 16 * n),
                    ("avail ring", l.avail, 6 + 2 * n),
                    ("used ring", l.used, 6 + 8 * n),
                ],
                Layout::Packed(l) => [
                    ("desc ring", l.desc, 16 * n),
                    ("driver event area", l.driver, 4),
                    ("device event area", l.device, 4),
                ],
            };
            for (name, a, l) in areas {
                if gpa >= a && gpa < a + l {
                    return format!("{s} {name} +{:#x}", gpa - a);
                }
            }
            let b0 = self.g.buffer_gpa(rx, 0);
            if gpa >= b0 && gpa < b0 + n * bl {
                return format!("{s} buffer {} +{:#x}", (gpa - b0) / bl, (gpa - b0) % bl);
            }
        }
        "padding".to_string()
    }

    pub(super) fn check_mem(&self, want: &Mem, what: &str) {
        let got = self.snapshot();
        if got.b == want.b {
            return;
        }
        let diffs: Vec<usize> = (0..got.b.len())
            .filter(|&i| got.b[i] != want.b[i])
            .collect();
        let first = diffs[0];
        let gpa = self.base + first as u64;
        let lo = first & !15;
        let hi = (lo + 32).min(got.b.len());
        panic!(
            "{what}: guest memory differs from the model at {} byte(s); first at {gpa:#x} ({})\n\
             engine: {:02x?}\nmodel:  {:02x?}",
            diffs.len(),
            self.describe(gpa),
            &got.b[lo..hi],
            &want.b[lo..hi],
        );
    }

    pub(super) fn check_counters(&self, what: &str) {
        let rx = self.g.qp.rx.counters();
        let tx = self.g.qp.tx.counters();
        assert_eq!(
            rx, self.dev[0].counters,
            "{what}: RX counters differ from the model"
        );
        assert_eq!(
            tx, self.dev[1].counters,
            "{what}: TX counters differ from the model"
        );
    }

    // ----- value generators -----

    pub(super) fn areas(&self) -> Vec<(u64, u64)> {
        let n = u64::from(self.c.size);
        let mut v = Vec::new();
        for rx in [true, false] {
            match self.g.layout(rx) {
                Layout::Split(l) => {
                    v.push((l.desc, 16 * n));
                    v.push((l.avail, 6 + 2 * n));
                    v.push((l.used, 6 + 8 * n));
                }
                Layout::Packed(l) => {
                    v.push((l.desc, 16 * n));
                    v.push((l.driver, 4));
                    v.push((l.device, 4));
                }
            }
        }
        v
    }

    pub(super) fn gen_addr(&self, inp: &mut Input<'_>, rx: bool) -> u64 {
        let sel = inp.u8();
        let (base, len) = (self.base, self.len);
        match sel % 8 {
            0..=2 => {
                let b = self.g.buffer_gpa(rx, inp.u16() % self.c.size);
                if sel & 0x80 != 0 {
                    b + u64::from(inp.u8() % 64)
                } else {
                    b
                }
            }
            3 => self.g.buffer_gpa(!rx, inp.u16() % self.c.size),
            4 => {
                let areas = self.areas();
                let (a, l) = areas[usize::from(inp.u8()) % areas.len()];
                a + u64::from(inp.u16()) % l
            }
            // Near the end of guest memory: buffers that run past it.
            5 => base + len - 1 - u64::from(inp.u16() % 256),
            6 => [
                0,
                base - 1,
                base - 16,
                base + len,
                base + len + 4096,
                u64::MAX - 15,
                u64::MAX,
                1 << 63,
            ][usize::from(inp.u8() % 8)],
            _ => inp.u64(),
        }
    }

    pub(super) fn gen_len(&self, inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 10 {
            0 => 0,
            1 => 1 + u32::from(inp.u8()),
            2 => self.c.buf_len,
            3 => self.c.buf_len + 1,
            4 => u32::MAX,
            5 => 0x8000_0000 | u32::from(inp.u16()),
            6 => 16 * (1 + u32::from(inp.u8() % 16)),
            7 => self.c.hdr_len as u32,
            8 => self.len as u32,
            _ => inp.u32(),
        }
    }

    /// Descriptor flags: NEXT, WRITE (the right direction for the ring
    /// unless flipped), INDIRECT; packed: AVAIL/USED for the driver's wrap
    /// or raw; sometimes unknown bits.
    pub(super) fn gen_flags(&self, inp: &mut Input<'_>, rx: bool, wrap: bool) -> u16 {
        let b = inp.u8();
        let mut f = 0;
        if b & 1 != 0 {
            f |= NEXT;
        }
        if b & 6 == 6 {
            f |= INDIRECT;
        }
        if (b & 8 != 0) != rx {
            f |= WRITE;
        }
        if self.c.packed {
            if b & 0x10 != 0 {
                if b & 0x20 != 0 {
                    f |= AVAIL;
                }
                if b & 0x40 != 0 {
                    f |= USED;
                }
            } else {
                f |= avail_bits(wrap);
            }
        }
        if b & 0x80 != 0 {
            f |= inp.u16() & 0x7f78;
        }
        f
    }

    pub(super) fn gen_next(&self, inp: &mut Input<'_>, i: u16) -> u16 {
        let n = self.c.size;
        match inp.u8() % 4 {
            0 => (i + 1) % n,
            1 => i,
            2 => n.saturating_add(u16::from(inp.u8())),
            _ => inp.u16(),
        }
    }

    // ----- driver primitives -----

    pub(super) fn write_desc(&self, rx: bool, i: u16, d: Desc) {
        match self.g.layout(rx) {
            Layout::Split(l) => self.write_split(l.desc + 16 * u64::from(i), d),
            Layout::Packed(l) => self.write_packed(l.desc + 16 * u64::from(i), d),
        }
    }

    pub(super) fn write_split(&self, gpa: u64, d: Desc) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&d.addr.to_le_bytes());
        b[8..12].copy_from_slice(&d.len.to_le_bytes());
        b[12..14].copy_from_slice(&d.flags.to_le_bytes());
        b[14..].copy_from_slice(&d.next_or_id.to_le_bytes());
        self.write(gpa, &b);
    }

    pub(super) fn write_packed(&self, gpa: u64, d: Desc) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&d.addr.to_le_bytes());
        b[8..12].copy_from_slice(&d.len.to_le_bytes());
        b[12..14].copy_from_slice(&d.next_or_id.to_le_bytes());
        b[14..].copy_from_slice(&d.flags.to_le_bytes());
        self.write(gpa, &b);
    }

    /// Writes entry `i` of an indirect table (split or packed layout).
    pub(super) fn write_table_entry(&self, table: u64, i: u16, d: Desc) {
        let gpa = table + 16 * u64::from(i);
        if self.c.packed {
            self.write_packed(gpa, d);
        } else {
            self.write_split(gpa, d);
        }
    }

    pub(super) fn split_avail(&self, rx: bool) -> u64 {
        match self.g.layout(rx) {
            Layout::Split(l) => l.avail,
            Layout::Packed(_) => unreachable!(),
        }
    }

    /// Split: puts `head` in the next avail slot and bumps `avail.idx`.
    pub(super) fn post_split_head(&self, rx: bool, head: u16) {
        let avail = self.split_avail(rx);
        let idx = self.r16(avail + 2);
        let slot = u64::from(idx % self.c.size);
        self.write(avail + 4 + 2 * slot, &head.to_le_bytes());
        self.write(avail + 2, &idx.wrapping_add(1).to_le_bytes());
    }

    /// Packed: writes a chain at the driver's position, the head's flags
    /// last; `descs[i].flags` get the AVAIL/USED bits of their slot.
    pub(super) fn post_packed(&mut self, rx: bool, descs: &[Desc]) {
        let Layout::Packed(l) = self.g.layout(rx) else {
            unreachable!()
        };
        let d = &mut self.drv[side(rx)];
        let mut slots = Vec::with_capacity(descs.len());
        for _ in descs {
            slots.push((d.pk_next, d.pk_wrap));
            d.pk_next += 1;
            if d.pk_next == self.c.size {
                d.pk_next = 0;
                d.pk_wrap = !d.pk_wrap;
            }
        }
        for (desc, &(slot, wrap)) in descs.iter().zip(&slots).rev() {
            let mut dd = *desc;
            dd.flags = (dd.flags & !(AVAIL | USED)) | avail_bits(wrap);
            self.write_packed(l.desc + 16 * u64::from(slot), dd);
        }
    }

    // ----- driver operations -----

    /// A well-formed chain: 1-4 descriptors over consecutive buffers, or
    /// the same behind an indirect table.
    pub(super) fn op_post(&mut self, inp: &mut Input<'_>, rx: bool) {
        let b = inp.u8();
        let n = self.c.size;
        let mut k = (1 + u16::from(b % 4)).min(n);
        let use_ind = b & 0x10 != 0 && n >= 2;
        if use_ind {
            if b & 0x40 != 0 {
                // A long table (up to 64 entries): many segments per chain.
                k = (k * 16).min((self.c.buf_len / 16) as u16);
            }
            k = k.min(n - 1);
        }
        let bl = self.c.buf_len as usize;
        let hl = self.c.hdr_len;
        // Lengths of the k pieces.
        let lens: Vec<u32> = if rx {
            (0..k)
                .map(|_| {
                    if b & 0x20 != 0 {
                        u32::from(inp.u16()) % (self.c.buf_len + 1)
                    } else {
                        self.c.buf_len
                    }
                })
                .collect()
        } else {
            let l = usize::from(inp.u16()) % (usize::from(k) * bl - hl + 1);
            let total = hl + l;
            let per = total.div_ceil(usize::from(k));
            let mut left = total;
            (0..k)
                .map(|_| {
                    let p = per.min(left);
                    left -= p;
                    p as u32
                })
                .collect()
        };
        // TX bytes: header (zero or raw) and a pattern.
        let stream: Vec<u8> = if rx {
            Vec::new()
        } else {
            let total: usize = lens.iter().map(|&l| l as usize).sum();
            let mut s = vec![0u8; hl];
            if b & 0x20 != 0 {
                for x in s.iter_mut() {
                    *x = inp.u8();
                }
            }
            let seed = usize::from(inp.u8());
            s.extend_from_slice(&self.pattern[seed..seed + total - hl]);
            s
        };
        let start = if self.c.packed {
            self.drv[side(rx)].pk_next
        } else {
            self.drv[side(rx)].next_desc
        };
        let first_data = if use_ind { 1 } else { 0 };
        let mut pos = 0;
        let mut descs = Vec::new();
        for (i, &l) in lens.iter().enumerate() {
            let buf = (start + first_data + i as u16) % n;
            let gpa = self.g.buffer_gpa(rx, buf);
            if !rx {
                self.write(gpa, &stream[pos..pos + l as usize]);
                pos += l as usize;
            }
            let last = i + 1 == lens.len();
            let mut flags = if last { 0 } else { NEXT };
            if rx {
                flags |= WRITE;
            }
            let next = if use_ind { i as u16 + 1 } else { (buf + 1) % n };
            descs.push(Desc {
                addr: gpa,
                len: l,
                flags,
                next_or_id: if self.c.packed { start } else { next },
            });
        }
        if use_ind {
            let table = self.g.buffer_gpa(rx, start);
            for (i, d) in descs.iter().enumerate() {
                self.write_table_entry(table, i as u16, *d);
            }
            descs = vec![Desc {
                addr: table,
                len: 16 * u32::from(k),
                flags: INDIRECT,
                next_or_id: start,
            }];
        }
        if self.c.packed {
            self.post_packed(rx, &descs);
        } else {
            for (i, d) in descs.iter().enumerate() {
                self.write_desc(rx, (start + i as u16) % n, *d);
            }
            self.post_split_head(rx, start);
            self.drv[side(rx)].next_desc = (start + descs.len() as u16 + first_data) % n;
        }
    }

    pub(super) fn op_raw_desc(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let i = inp.u16() % self.c.size;
        let wrap = self.drv[side(rx)].pk_wrap;
        let d = Desc {
            addr: self.gen_addr(inp, rx),
            len: self.gen_len(inp),
            flags: self.gen_flags(inp, rx, wrap),
            next_or_id: self.gen_next(inp, i),
        };
        if self.c.packed && b & 2 != 0 {
            // At the driver's position (consumed next), keeping raw flags.
            let Layout::Packed(l) = self.g.layout(rx) else {
                unreachable!()
            };
            let dr = &mut self.drv[side(rx)];
            let slot = dr.pk_next;
            dr.pk_next += 1;
            if dr.pk_next == self.c.size {
                dr.pk_next = 0;
                dr.pk_wrap = !dr.pk_wrap;
            }
            self.write_packed(l.desc + 16 * u64::from(slot), d);
        } else {
            self.write_desc(rx, i, d);
            if !self.c.packed && b & 2 != 0 {
                self.post_split_head(rx, i);
            }
        }
    }

    /// An indirect table in buffer memory (possibly unaligned, possibly
    /// nesting or pointing at itself) and a descriptor pointing at it with
    /// a right or wrong length.
    pub(super) fn op_indirect(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let n = self.c.size;
        let j = inp.u16() % n;
        let mis = if b & 2 != 0 {
            1 + u64::from(inp.u8() % 15)
        } else {
            0
        };
        let room = (u64::from(self.c.buf_len) - mis) / 16;
        let cnt = 1 + u64::from(inp.u8()) % room.min(32);
        let table = self.g.buffer_gpa(rx, j) + mis;
        let wrap = self.drv[side(rx)].pk_wrap;
        for i in 0..cnt as u16 {
            let mut d = Desc {
                addr: self.gen_addr(inp, rx),
                len: self.gen_len(inp),
                flags: self.gen_flags(inp, rx, wrap),
                next_or_id: 0,
            };
            d.next_or_id = if self.c.packed {
                inp.u16()
            } else {
                match inp.u8() % 4 {
                    0 => i + 1,
                    1 => i,
                    2 => cnt as u16 + u16::from(inp.u8()),
                    _ => inp.u16(),
                }
            };
            if d.flags & INDIRECT != 0 && b & 4 != 0 {
                // Nested: points at its own table.
                d.addr = table;
                d.len = 16 * cnt as u32;
            }
            self.write_table_entry(table, i, d);
        }
        let dlen = match inp.u8() % 6 {
            0..=2 => 16 * cnt as u32,
            3 => 0,
            4 => 16 * cnt as u32 + 1 + u32::from(inp.u8() % 15),
            _ => self.gen_len(inp),
        };
        let lf = inp.u8();
        let mut flags = INDIRECT;
        if lf & 1 != 0 {
            flags |= NEXT;
        }
        if lf & 2 != 0 {
            flags |= WRITE;
        }
        let link = Desc {
            addr: table,
            len: dlen,
            flags,
            next_or_id: if self.c.packed {
                inp.u16()
            } else {
                self.gen_next(inp, 0)
            },
        };
        if self.c.packed {
            if lf & 4 != 0 {
                // Indirect in second position, behind a plain head.
                let head = Desc {
                    addr: self.g.buffer_gpa(rx, j),
                    len: 64,
                    flags: NEXT | if rx { WRITE } else { 0 },
                    next_or_id: 0,
                };
                self.post_packed(rx, &[head, link]);
            } else {
                self.post_packed(rx, &[link]);
            }
        } else {
            let i = inp.u16() % n;
            self.write_desc(rx, i, link);
            if lf & 4 == 0 {
                self.post_split_head(rx, i);
            }
        }
    }

    pub(super) fn op_avail(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let n = self.c.size;
        match self.g.layout(rx) {
            Layout::Split(l) => match (b >> 1) % 4 {
                0 => {
                    let v = inp.u16();
                    let head = if b & 0x80 != 0 { v } else { v % n };
                    self.post_split_head(rx, head);
                }
                1 => {
                    let slot = u64::from(inp.u16() % n);
                    let v = inp.u16();
                    self.write(l.avail + 4 + 2 * slot, &v.to_le_bytes());
                }
                2 => {
                    let idx = self.r16(l.avail + 2);
                    let delta = match inp.u8() % 7 {
                        0 => 0,
                        1 => 1,
                        2 => n,
                        3 => n.wrapping_add(1),
                        4 => 0xffff, // stale: one behind
                        5 => 0x8000,
                        _ => inp.u16(),
                    };
                    self.write(l.avail + 2, &idx.wrapping_add(delta).to_le_bytes());
                }
                _ => {
                    // avail.flags or used_event.
                    let at = if b & 0x80 != 0 {
                        l.avail + 4 + 2 * u64::from(n)
                    } else {
                        l.avail
                    };
                    self.write(at, &inp.u16().to_le_bytes());
                }
            },
            Layout::Packed(l) => match (b >> 1) % 4 {
                0 => {
                    let d = &mut self.drv[side(rx)];
                    d.pk_wrap = !d.pk_wrap;
                    d.pk_next = inp.u16() % n;
                }
                1 => {
                    let slot = u64::from(inp.u16() % n);
                    self.write(l.desc + 16 * slot + 14, &inp.u16().to_le_bytes());
                }
                2 => {
                    let v = inp.u32();
                    self.write(l.driver, &v.to_le_bytes());
                }
                _ => {
                    // Make a slot available for the driver's wrap as is.
                    let slot = u64::from(inp.u16() % n);
                    let p = l.desc + 16 * slot + 14;
                    let f = self.r16(p);
                    let wrap = self.drv[side(rx)].pk_wrap;
                    let f = (f & !(AVAIL | USED)) | avail_bits(wrap);
                    self.write(p, &f.to_le_bytes());
                }
            },
        }
    }

    pub(super) fn op_raw_bytes(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let areas = self.areas();
        let (a, l) = areas[side(rx) * 3 + usize::from((b >> 1) % 3)];
        let off = u64::from(inp.u16()) % l;
        let cnt = (1 + u64::from(inp.u8() % 8)).min(l - off);
        let bytes: Vec<u8> = (0..cnt).map(|_| inp.u8()).collect();
        self.write(a + off, &bytes);
    }

    // ----- device operations (checked) -----

    pub(super) fn op_tx_burst(&mut self, inp: &mut Input<'_>) {
        let max = usize::from(inp.u8());
        let poff = usize::from(inp.u16());
        let mut m = self.snapshot();
        let c = self.c;
        let (want_n, want) = self.dev[1].recv_burst(&mut m, &c, max, |_, _| {});
        let mut got = Vec::new();
        let n = self
            .g
            .qp
            .tx
            .recv_burst(max, |f| got.push(FrameRec::record(f, poff)));
        assert_eq!(n, want_n, "recv_burst({max}) returned {n}, model {want_n}");
        assert_eq!(got.len(), want.len(), "number of TX frames");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            g.check(w, k);
        }
        self.check_counters("recv_burst");
        self.check_mem(&m, "recv_burst");
    }

    pub(super) fn gen_frame(&self, inp: &mut Input<'_>) -> (VirtioNetHdr, usize, usize) {
        let bl = self.c.buf_len as usize;
        let hl = self.c.hdr_len;
        let len = match inp.u8() % 9 {
            0 => 0,
            1 => 1 + usize::from(inp.u8() % 64),
            2 => 60 + usize::from(inp.u16()) % 1455,
            3 => usize::from(inp.u16()) % 9001,
            4 => MAX_FRAME_LEN,
            5 => MAX_FRAME_LEN + 1,
            6 => (bl - hl).saturating_sub(1) + usize::from(inp.u8() % 3),
            7 => (bl * 2 - hl) + usize::from(inp.u8() % 3),
            _ => usize::from(inp.u16()),
        };
        let seed = usize::from(inp.u8());
        let hb = inp.u8();
        let valid = if hb & 0x80 != 0 {
            net_hdr::F_DATA_VALID
        } else {
            0
        };
        let h = if hb & 1 != 0 {
            let mut raw = [0u8; MAX_HDR_LEN];
            for x in raw.iter_mut() {
                *x = inp.u8();
            }
            VirtioNetHdr::from_bytes(&raw, MAX_HDR_LEN)
        } else if hb & 2 != 0 {
            let gso = [
                net_hdr::GSO_NONE,
                net_hdr::GSO_TCPV4,
                net_hdr::GSO_TCPV6,
                net_hdr::GSO_UDP,
                net_hdr::GSO_UDP_L4,
                net_hdr::GSO_TCPV4 | net_hdr::GSO_ECN,
            ][usize::from(hb >> 2) % 6];
            VirtioNetHdr {
                flags: net_hdr::F_NEEDS_CSUM | valid,
                gso_type: gso,
                hdr_len: 54,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
                num_buffers: 0,
            }
        } else {
            VirtioNetHdr {
                flags: valid,
                ..VirtioNetHdr::default()
            }
        };
        (h, seed, len)
    }

    pub(super) fn op_rx_burst(&mut self, inp: &mut Input<'_>) {
        let nf = 1 + usize::from(inp.u8() % 8);
        let frames: Vec<(VirtioNetHdr, usize, usize)> =
            (0..nf).map(|_| self.gen_frame(inp)).collect();
        let mut m = self.snapshot();
        let c = self.c;
        let dev = &mut self.dev[0];
        dev.sync(&mut m, &c);
        let want: Vec<Result<(), DropReason>> = frames
            .iter()
            .map(|&(h, seed, len)| {
                dev.push(&mut m, &c, &h, Src::Host(&self.pattern[seed..seed + len]))
            })
            .collect();
        dev.finish_burst(&mut m);
        let mut got = Vec::new();
        {
            let mut burst = self.g.qp.rx.burst();
            for &(h, seed, len) in &frames {
                got.push(burst.push(&h, &self.pattern[seed..seed + len]));
            }
        }
        assert_eq!(got, want, "RxBurst::push results differ from the model");
        self.check_counters("RxBurst::push");
        self.check_mem(&m, "RxBurst::push");
    }

    pub(super) fn op_echo(&mut self, inp: &mut Input<'_>) {
        let max = usize::from(inp.u8());
        let poff = usize::from(inp.u16());
        let mut m = self.snapshot();
        let c = self.c;
        let [rxd, txd] = &mut self.dev;
        rxd.sync(&mut m, &c);
        let mut want_push = Vec::new();
        let (want_n, want) = txd.recv_burst(&mut m, &c, max, |m, f| {
            want_push.push(rxd.push(m, &c, &f.hdr, Src::Frame(f)));
        });
        rxd.finish_burst(&mut m);

        let mut got = Vec::new();
        let mut got_push = Vec::new();
        let qp = &mut self.g.qp;
        let n = {
            let mut rx = qp.rx.burst();
            qp.tx.recv_burst(max, |f| {
                got.push(FrameRec::record(f, poff));
                let h = *f.hdr();
                got_push.push(rx.push(&h, &*f));
            })
        };
        assert_eq!(
            n, want_n,
            "echo: recv_burst({max}) returned {n}, model {want_n}"
        );
        assert_eq!(got.len(), want.len(), "echo: number of TX frames");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            g.check(w, k);
        }
        assert_eq!(
            got_push, want_push,
            "echo: push results differ from the model"
        );
        self.check_counters("echo");
        self.check_mem(&m, "echo");
    }

    pub(super) fn op_notify(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let enable = b & 2 != 0;
        let mut m = self.snapshot();
        let c = self.c;
        let dev = &mut self.dev[side(rx)];
        if enable {
            dev.sync(&mut m, &c);
            let want = dev.enable_notification(&mut m, &c);
            let got = if rx {
                self.g.qp.rx.enable_notifications()
            } else {
                self.g.qp.tx.enable_notifications()
            };
            assert_eq!(got, want, "enable_notifications (rx: {rx})");
        } else {
            // `disable_notifications` also picks up a pending ring start.
            dev.sync(&mut m, &c);
            dev.disable_notification(&mut m, &c);
            if rx {
                self.g.qp.rx.disable_notifications();
            } else {
                self.g.qp.tx.disable_notifications();
            }
        }
        self.check_counters("notifications");
        self.check_mem(&m, "notifications");
    }

    pub(super) fn op_query(&mut self, inp: &mut Input<'_>) {
        let b = inp.u8();
        let rx = b & 1 == 0;
        let max = usize::from(inp.u8());
        let mut m = self.snapshot();
        let c = self.c;
        let dev = &mut self.dev[side(rx)];
        dev.sync(&mut m, &c);
        let (want, got) = if rx {
            (dev.count_avail(&m, max), self.g.qp.rx.available(max))
        } else {
            (
                dev.count_avail(&m, usize::from(u16::MAX)),
                self.g.qp.tx.pending(),
            )
        };
        assert_eq!(got, want, "pending/available (rx: {rx})");
        self.check_counters("query");
        self.check_mem(&m, "query");
    }
}

pub(super) const fn avail_bits(wrap: bool) -> u16 {
    if wrap {
        AVAIL
    } else {
        USED
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The data plane: building chains, posting receive buffers, receiving and transmitting
//! frames.

use super::*;

impl TestDriver {
    // ===== chain building =====

    pub(super) fn check_indirect(&self) -> Result<(), DriverError> {
        if self.has_feature(VIRTIO_RING_F_INDIRECT_DESC) {
            Ok(())
        } else {
            Err(DriverError::FeatureNotAcked("VIRTIO_RING_F_INDIRECT_DESC"))
        }
    }

    /// Writes a chain of buffers of lengths `lens`, filled as `fill` says, either directly in
    /// the ring or behind an indirect descriptor, and records it as in flight. Publishes
    /// nothing. Returns the head id. On error nothing is leaked.
    pub(super) fn build_chain(
        &mut self,
        vring: usize,
        lens: &[u32],
        fill: Fill<'_>,
        indirect: bool,
    ) -> Result<u16, DriverError> {
        let size = usize::from(self.opts.queue_size);
        if lens.is_empty() || lens.len() > size {
            return Err(DriverError::InvalidLayout(format!(
                "{} descriptors in a chain (ring size {size})",
                lens.len()
            )));
        }
        let ndesc = if indirect { 1 } else { lens.len() };
        let free = self.vrings[vring].free_descs.len();
        if free < ndesc {
            return Err(DriverError::RingFull {
                needed: ndesc,
                free,
            });
        }

        let mut chain = Chain {
            descs: Vec::with_capacity(ndesc),
            allocs: Vec::with_capacity(lens.len() + 1),
            bufs: Vec::with_capacity(lens.len()),
        };
        let res = self.fill_chain(vring, lens, fill, indirect, &mut chain);
        if let Err(e) = res {
            self.free_chain(vring, chain);
            return Err(e);
        }
        let head = chain.descs[0];
        self.vrings[vring].chains[usize::from(head)] = Some(chain);
        Ok(head)
    }

    pub(super) fn fill_chain(
        &mut self,
        vring: usize,
        lens: &[u32],
        fill: Fill<'_>,
        indirect: bool,
        chain: &mut Chain,
    ) -> Result<(), DriverError> {
        // Offset of the next buffer in the virtual concatenation `hdr || frame`.
        let mut off = 0usize;
        for &len in lens {
            let (gpa, rounded) = self.alloc.alloc(u64::from(len))?;
            chain.allocs.push((gpa, rounded));
            chain.bufs.push((gpa, len));
            let len = len as usize;
            match fill {
                Fill::Poison => {
                    let mut done = 0;
                    while done < len {
                        let n = (len - done).min(POISON.len());
                        self.mem
                            .write_slice(&POISON[..n], GuestAddress(gpa + done as u64))?;
                        done += n;
                    }
                }
                Fill::Bytes(hdr, frame) => {
                    // The part of `hdr` in [off, off + len), then the part of `frame`.
                    let h = hdr.get(off.min(hdr.len())..(off + len).min(hdr.len()));
                    let h = h.unwrap_or_default();
                    let f_start = off.saturating_sub(hdr.len());
                    let f = &frame[f_start..f_start + (len - h.len())];
                    self.mem.write_slice(h, GuestAddress(gpa))?;
                    self.mem
                        .write_slice(f, GuestAddress(gpa + h.len() as u64))?;
                }
            }
            off += len;
        }
        let wflag = if matches!(fill, Fill::Poison) {
            VRING_DESC_F_WRITE as u16
        } else {
            0
        };
        let n = chain.bufs.len();
        if indirect {
            let table_len = DESC_SIZE * n as u64;
            let (table, rounded) = self.alloc.alloc(table_len)?;
            chain.allocs.push((table, rounded));
            for (i, &(gpa, len)) in chain.bufs.iter().enumerate() {
                let last = i + 1 == n;
                let flags = wflag | if last { 0 } else { VRING_DESC_F_NEXT as u16 };
                let next = if last { 0 } else { (i + 1) as u16 };
                let d = desc_bytes(gpa, len, flags, next);
                self.mem
                    .write_slice(&d, GuestAddress(table + DESC_SIZE * i as u64))?;
            }
            let v = &mut self.vrings[vring];
            let id = v
                .free_descs
                .pop()
                .ok_or(DriverError::RingFull { needed: 1, free: 0 })?;
            chain.descs.push(id);
            let d = desc_bytes(table, table_len as u32, VRING_DESC_F_INDIRECT as u16, 0);
            self.mem.write_slice(&d, v.addrs.desc(id))?;
        } else {
            let v = &mut self.vrings[vring];
            for _ in 0..n {
                let id = v
                    .free_descs
                    .pop()
                    .ok_or(DriverError::RingFull { needed: n, free: 0 })?;
                chain.descs.push(id);
            }
            for (i, &(gpa, len)) in chain.bufs.iter().enumerate() {
                let last = i + 1 == n;
                let flags = wflag | if last { 0 } else { VRING_DESC_F_NEXT as u16 };
                let next = if last { 0 } else { chain.descs[i + 1] };
                let d = desc_bytes(gpa, len, flags, next);
                self.mem.write_slice(&d, v.addrs.desc(chain.descs[i]))?;
            }
        }
        Ok(())
    }

    pub(super) fn free_chain(&mut self, vring: usize, chain: Chain) {
        for (gpa, len) in chain.allocs {
            self.alloc.release(gpa, len);
        }
        self.vrings[vring].free_descs.extend(chain.descs);
    }

    /// Writes `head` into the next avail slot; does not publish `avail.idx`.
    pub(super) fn stage_avail(&mut self, vring: usize, head: u16) -> Result<(), DriverError> {
        let v = &mut self.vrings[vring];
        self.mem
            .write_obj(head.to_le(), v.addrs.avail_entry(v.next_avail))?;
        v.next_avail = v.next_avail.wrapping_add(1);
        Ok(())
    }

    /// Publishes the staged avail entries: `Release` store of `avail.idx`, so the entries and
    /// the descriptors behind them are visible before the index (virtio 1.2, 2.7.13.2).
    pub(super) fn publish_avail(&mut self, vring: usize) -> Result<(), DriverError> {
        let v = &self.vrings[vring];
        self.mem
            .store(v.next_avail.to_le(), v.addrs.avail_idx(), Ordering::Release)?;
        Ok(())
    }

    // ===== receive =====

    /// Makes up to `count` receive buffers of `buf_len` bytes available on queue pair `qp`,
    /// laid out as `layout`, and publishes them with one `avail.idx` update. Does not kick.
    /// Returns how many were posted: fewer than `count` when descriptors or buffer memory ran
    /// out.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], [`DriverError::InvalidLayout`] (zero length, more
    /// pieces than bytes or than the ring size), [`DriverError::FeatureNotAcked`] for
    /// [`RxLayout::Indirect`] without `INDIRECT_DESC`, or a guest memory error.
    pub fn post_rx_buffers(
        &mut self,
        qp: u16,
        count: usize,
        buf_len: u32,
        layout: RxLayout,
    ) -> Result<usize, DriverError> {
        let vring = self.vring_index(qp, true)?;
        let (n, indirect) = match layout {
            RxLayout::Single => (1, false),
            RxLayout::Split(n) => (usize::from(n), false),
            RxLayout::Indirect(n) => {
                self.check_indirect()?;
                (usize::from(n), true)
            }
        };
        if n == 0 || n > buf_len as usize || n > usize::from(self.opts.queue_size) {
            return Err(DriverError::InvalidLayout(format!(
                "{n} descriptors for a {buf_len}-byte buffer"
            )));
        }
        let lens: Vec<u32> = split_lengths(buf_len as usize, n)
            .into_iter()
            .map(|l| l as u32)
            .collect();
        let mut posted = 0;
        while posted < count {
            match self.build_chain(vring, &lens, Fill::Poison, indirect) {
                Ok(head) => {
                    self.stage_avail(vring, head)?;
                    posted += 1;
                }
                Err(DriverError::RingFull { .. } | DriverError::OutOfMemory(_)) => break,
                Err(e) => return Err(e),
            }
        }
        if posted > 0 {
            self.publish_avail(vring)?;
        }
        Ok(posted)
    }

    /// Consumes the used receive elements of queue pair `qp` and returns the complete frames,
    /// freeing their buffers. With `MRG_RXBUF` a frame spanning `num_buffers` elements is
    /// reassembled; if only some of its elements are used yet, it is kept for a later call.
    pub fn recv_frames(&mut self, qp: u16) -> Vec<RxFrame> {
        let Ok(vring) = self.vring_index(qp, true) else {
            return Vec::new();
        };
        let mut frames = Vec::new();
        for (id, len) in self.drain_used(vring) {
            let Some(chain) = self.vrings[vring].chains[usize::from(id)].take() else {
                continue;
            };
            let bytes = self.read_chain(vring, &chain, id, len);
            self.free_chain(vring, chain);
            if let Some(f) = self.rx_element(vring, id, len, bytes) {
                frames.push(f);
            }
        }
        frames
    }

    /// Reads the first `len` bytes of a used chain (clamped to its capacity).
    pub(super) fn read_chain(&mut self, vring: usize, chain: &Chain, id: u16, len: u32) -> Vec<u8> {
        let cap = chain.capacity();
        if u64::from(len) > cap {
            self.violation(format!(
                "vring {vring}: used id {id} len {len} exceeds chain capacity {cap}"
            ));
        }
        let mut left = u64::from(len).min(cap) as usize;
        let mut out = vec![0u8; left];
        let mut off = 0;
        for &(gpa, blen) in &chain.bufs {
            if left == 0 {
                break;
            }
            let n = left.min(blen as usize);
            if let Err(e) = self
                .mem
                .read_slice(&mut out[off..off + n], GuestAddress(gpa))
            {
                self.violation(format!("vring {vring}: reading used id {id}: {e}"));
            }
            off += n;
            left -= n;
        }
        out
    }

    /// Feeds one used receive chain into frame reassembly.
    pub(super) fn rx_element(
        &mut self,
        vring: usize,
        id: u16,
        len: u32,
        bytes: Vec<u8>,
    ) -> Option<RxFrame> {
        if let Some(mut p) = self.vrings[vring].partial.take() {
            p.frame.data.extend_from_slice(&bytes);
            p.frame.used.push((id, len));
            if p.frame.used.len() == usize::from(p.expected) {
                return Some(p.frame);
            }
            self.vrings[vring].partial = Some(p);
            return None;
        }
        let hlen = self.hdr_len();
        if bytes.len() < hlen {
            self.violation(format!(
                "vring {vring}: used id {id} len {len} is shorter than the {hlen}-byte header"
            ));
        }
        let split = bytes.len().min(hlen);
        let hdr = bytes[..split].to_vec();
        let data = bytes[split..].to_vec();
        let mut num_buffers = 1;
        if self.has_feature(VIRTIO_NET_F_MRG_RXBUF) {
            num_buffers = decode_hdr(&hdr).num_buffers;
            if num_buffers == 0 {
                self.violation(format!("vring {vring}: used id {id} has num_buffers 0"));
                num_buffers = 1;
            }
        }
        let frame = RxFrame {
            hdr,
            data,
            num_buffers,
            used: vec![(id, len)],
        };
        if num_buffers == 1 {
            return Some(frame);
        }
        self.vrings[vring].partial = Some(PartialFrame {
            frame,
            expected: num_buffers,
        });
        None
    }

    /// [`TestDriver::recv_frames`] in a loop until `n` frames arrived or `timeout` passed.
    /// Waits on the call eventfd but also looks at the used ring every few milliseconds, so a
    /// missing call only slows it down. Returns what arrived.
    pub fn recv_frames_until(&mut self, qp: u16, n: usize, timeout: Duration) -> Vec<RxFrame> {
        self.collect_until(qp, true, n, timeout, |d| d.recv_frames(qp))
    }

    /// Calls `take` until it returned `n` items in all or `timeout` passed, waiting between
    /// calls on queue pair `qp`'s call eventfd of the `rx` or TX queue, at most
    /// [`POLL_INTERVAL`] at a time. Returns the items.
    fn collect_until<T>(
        &mut self,
        qp: u16,
        rx: bool,
        n: usize,
        timeout: Duration,
        mut take: impl FnMut(&mut Self) -> Vec<T>,
    ) -> Vec<T> {
        let deadline = Instant::now() + timeout;
        let mut items = Vec::new();
        loop {
            items.extend(take(self));
            let left = deadline.saturating_duration_since(Instant::now());
            if items.len() >= n || left.is_zero() {
                return items;
            }
            self.wait_call(qp, rx, left.min(POLL_INTERVAL));
        }
    }

    // ===== transmit =====

    /// Makes one frame available on queue pair `qp`'s transmit queue: `net_hdr` followed by
    /// `frame`, laid out as `layout`. Publishes `avail.idx` but does not kick. Returns the head
    /// descriptor id.
    ///
    /// # Errors
    ///
    /// [`DriverError::RingFull`] or [`DriverError::OutOfMemory`] (collect completions with
    /// [`TestDriver::tx_completions`] and retry), [`DriverError::NoSuchQueuePair`],
    /// [`DriverError::InvalidLayout`] (more pieces than bytes, an empty piece for
    /// [`TxLayout::HeaderSplit`]), [`DriverError::FeatureNotAcked`], or a guest memory error.
    pub fn send_frame(
        &mut self,
        qp: u16,
        net_hdr: &[u8],
        frame: &[u8],
        layout: TxLayout,
    ) -> Result<u16, DriverError> {
        let vring = self.vring_index(qp, false)?;
        let total = net_hdr.len() + frame.len();
        let (lens, indirect) = match layout {
            TxLayout::Single => (vec![total], false),
            TxLayout::HeaderSplit => {
                if net_hdr.is_empty() || frame.is_empty() {
                    return Err(DriverError::InvalidLayout(
                        "HeaderSplit needs a header and a frame".into(),
                    ));
                }
                (vec![net_hdr.len(), frame.len()], false)
            }
            TxLayout::Segments(n) => (self.tx_split(total, n)?, false),
            TxLayout::Indirect(n) => {
                self.check_indirect()?;
                (self.tx_split(total, n)?, true)
            }
        };
        let lens = lens
            .into_iter()
            .map(|l| {
                u32::try_from(l)
                    .map_err(|_| DriverError::InvalidLayout(format!("{l}-byte descriptor")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let head = self.build_chain(vring, &lens, Fill::Bytes(net_hdr, frame), indirect)?;
        self.stage_avail(vring, head)?;
        self.publish_avail(vring)?;
        Ok(head)
    }

    pub(super) fn tx_split(&self, total: usize, n: u16) -> Result<Vec<usize>, DriverError> {
        let n = usize::from(n);
        if n == 0 || n > total.max(1) {
            return Err(DriverError::InvalidLayout(format!(
                "{n} segments for {total} bytes"
            )));
        }
        Ok(split_lengths(total, n))
    }

    /// Consumes the used transmit elements of queue pair `qp`, frees their buffers, and
    /// returns them as `(id, len)`.
    pub fn tx_completions(&mut self, qp: u16) -> Vec<(u16, u32)> {
        let Ok(vring) = self.vring_index(qp, false) else {
            return Vec::new();
        };
        self.reap_used(vring)
            .into_iter()
            .filter(|&(_, _, tracked)| tracked)
            .map(|(id, len, _)| (id, len))
            .collect()
    }

    /// [`TestDriver::tx_completions`] in a loop until `n` completions arrived or `timeout`
    /// passed, waiting on the call eventfd and polling the used ring every few milliseconds.
    pub fn tx_completions_until(
        &mut self,
        qp: u16,
        n: usize,
        timeout: Duration,
    ) -> Vec<(u16, u32)> {
        self.collect_until(qp, false, n, timeout, |d| d.tx_completions(qp))
    }
}

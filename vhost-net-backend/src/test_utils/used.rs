// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The used ring, notifications (kicks, calls, `EVENT_IDX`), raw ring access for hostile
//! tests, and the violations the driver recorded.

use super::*;

impl TestDriver {
    // ===== used ring =====

    /// Takes every new used element of a vring, checks its id, and updates `used_event`
    /// (`EVENT_IDX`, auto mode). Elements of raw heads go to `raw_used`.
    pub(super) fn drain_used(&mut self, vring: usize) -> Vec<(u16, u32)> {
        let mut out = Vec::new();
        loop {
            let got = self.drain_used_once(vring, &mut out);
            if !got || !self.update_used_event(vring) {
                return out;
            }
        }
    }

    /// One pass over the used ring; returns whether anything was consumed.
    pub(super) fn drain_used_once(&mut self, vring: usize, out: &mut Vec<(u16, u32)>) -> bool {
        let addrs = self.vrings[vring].addrs;
        // Acquire: the elements below were written before the device published the index.
        let used_idx = match self.mem.load::<u16>(addrs.used_idx(), Ordering::Acquire) {
            Ok(i) => u16::from_le(i),
            Err(e) => {
                self.violation(format!("vring {vring}: reading used.idx: {e}"));
                return false;
            }
        };
        let last = self.vrings[vring].last_used;
        let pending = used_idx.wrapping_sub(last);
        if pending == 0 {
            return false;
        }
        if pending > addrs.size {
            // Elements beyond the ring size cannot be real; consume nothing.
            self.violation(format!(
                "vring {vring}: used.idx {used_idx} is {pending} ahead of {last}, ring size {}",
                addrs.size
            ));
            return false;
        }
        for i in 0..pending {
            let at = addrs.used_entry(last.wrapping_add(i));
            let id = self.mem.read_obj::<u32>(at).map(u32::from_le);
            let len = self
                .mem
                .read_obj::<u32>(at.unchecked_add(4))
                .map(u32::from_le);
            let (Ok(id), Ok(len)) = (id, len) else {
                self.violation(format!("vring {vring}: cannot read used element"));
                continue;
            };
            let v = &mut self.vrings[vring];
            match u16::try_from(id).ok().filter(|&h| h < addrs.size) {
                Some(h) if v.raw_heads[usize::from(h)] => {
                    v.raw_heads[usize::from(h)] = false;
                    v.raw_used.push((h, len));
                }
                Some(h) if v.chains[usize::from(h)].is_some() => out.push((h, len)),
                _ => self.violation(format!(
                    "vring {vring}: used id {id} (len {len}) is not in flight"
                )),
            }
        }
        self.vrings[vring].last_used = used_idx;
        true
    }

    /// With `EVENT_IDX` in auto mode, writes `used_event = last_used` (ask for a call on the
    /// next completion, as Linux does), then a full fence and a re-read of `used.idx`. Returns
    /// whether more elements arrived meanwhile.
    pub(super) fn update_used_event(&mut self, vring: usize) -> bool {
        let v = &self.vrings[vring];
        if !self.has_feature(VIRTIO_RING_F_EVENT_IDX) || !v.auto_used_event {
            return false;
        }
        let (addrs, last) = (v.addrs, v.last_used);
        if self
            .mem
            .store(last.to_le(), addrs.used_event(), Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The used_event store must be visible before we look at used.idx again, or a
        // completion in between would neither be seen nor signalled.
        fence(Ordering::SeqCst);
        self.mem
            .load::<u16>(addrs.used_idx(), Ordering::Acquire)
            .is_ok_and(|i| u16::from_le(i) != last)
    }

    /// Consumes every new used element of vring `vring` and frees the chains the driver tracked
    /// for them. Returns `(id, len, tracked)`: `tracked` is false for a raw head.
    pub(super) fn reap_used(&mut self, vring: usize) -> Vec<(u16, u32, bool)> {
        let used = self.drain_used(vring);
        used.into_iter()
            .map(|(id, len)| {
                let chain = self.vrings[vring].chains[usize::from(id)].take();
                let tracked = chain.is_some();
                if let Some(chain) = chain {
                    self.free_chain(vring, chain);
                }
                (id, len, tracked)
            })
            .collect()
    }

    /// Consumes every new used element of a vring without interpreting it: tracked chains are
    /// freed (and their data dropped), raw heads are returned too. Returns `(id, len)`.
    pub fn poll_used_raw(&mut self, qp: u16, rx: bool) -> Vec<(u16, u32)> {
        let Ok(vring) = self.vring_index(qp, rx) else {
            return Vec::new();
        };
        let mut out: Vec<(u16, u32)> = self
            .reap_used(vring)
            .into_iter()
            .map(|(id, len, _)| (id, len))
            .collect();
        out.append(&mut self.vrings[vring].raw_used);
        out
    }

    /// Used elements of heads published with [`TestDriver::push_avail`], consumed so far by
    /// the other used-ring readers.
    pub fn take_raw_used(&mut self, qp: u16, rx: bool) -> Vec<(u16, u32)> {
        match self.vring_index(qp, rx) {
            Ok(v) => std::mem::take(&mut self.vrings[v].raw_used),
            Err(_) => Vec::new(),
        }
    }

    // ===== notifications =====

    /// Waits up to `timeout` for the backend to signal a vring's call eventfd, and clears it.
    /// Returns whether it was signalled.
    pub fn wait_call(&self, qp: u16, rx: bool, timeout: Duration) -> bool {
        let Ok(v) = self.vring(qp, rx) else {
            return false;
        };
        match poll_fd(v.call.as_raw_fd(), libc::POLLIN, timeout) {
            Ok(r) if r & libc::POLLIN != 0 => v.call.read().is_ok(),
            _ => false,
        }
    }

    /// Clears a vring's call eventfd without waiting; returns whether it had been signalled.
    pub fn take_call(&self, qp: u16, rx: bool) -> bool {
        self.vring(qp, rx).is_ok_and(|v| v.call.read().is_ok())
    }

    /// Kicks queue pair `qp`'s transmit queue if the backend wants it. Returns whether it did.
    /// See [`TestDriver::kick_vring`].
    pub fn kick_tx(&self, qp: u16) -> bool {
        self.vring_index(qp, false)
            .is_ok_and(|v| self.kick_vring(v))
    }

    /// Kicks queue pair `qp`'s receive queue if the backend wants it. Returns whether it did.
    /// See [`TestDriver::kick_vring`].
    pub fn kick_rx(&self, qp: u16) -> bool {
        self.vring_index(qp, true).is_ok_and(|v| self.kick_vring(v))
    }

    /// Kicks a vring if the backend wants it, like Linux's `virtqueue_kick_prepare`: a full
    /// fence after the `avail.idx` store, then with `EVENT_IDX` kick iff `avail_event` lies in
    /// the indices made available since the previous call, else kick iff
    /// `VRING_USED_F_NO_NOTIFY` is clear. With [`DriverOpts::always_kick`] it always kicks.
    /// Returns whether it kicked (false for a vring that does not exist).
    pub fn kick_vring(&self, vring: usize) -> bool {
        let Some(v) = self.vrings.get(vring) else {
            return false;
        };
        let new = v.next_avail;
        let old = v.kicked_at.replace(new);
        let need = self.opts.always_kick || {
            fence(Ordering::SeqCst);
            if self.has_feature(VIRTIO_RING_F_EVENT_IDX) {
                self.mem
                    .load::<u16>(v.addrs.avail_event(), Ordering::Relaxed)
                    .is_ok_and(|e| need_event(u16::from_le(e), new, old))
            } else {
                self.mem
                    .load::<u16>(GuestAddress(v.addrs.used), Ordering::Relaxed)
                    .is_ok_and(|f| u16::from_le(f) & VRING_USED_F_NO_NOTIFY as u16 == 0)
            }
        };
        need && v.kick.write(1).is_ok()
    }

    /// Writes 1 to a vring's kick eventfd, unconditionally.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`] or [`DriverError::EventFd`].
    pub fn kick_raw(&self, vring: usize) -> Result<(), DriverError> {
        let v = self
            .vrings
            .get(vring)
            .ok_or(DriverError::NoSuchVring(vring))?;
        v.kick.write(1).map_err(DriverError::EventFd)
    }

    /// Writes `used_event` (the avail ring's trailing field) and turns off the automatic
    /// update for this vring (see [`TestDriver::set_auto_used_event`]).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn set_used_event(&mut self, qp: u16, rx: bool, idx: u16) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        self.vrings[i].auto_used_event = false;
        let at = self.vrings[i].addrs.used_event();
        self.mem.store(idx.to_le(), at, Ordering::Release)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// With `on` (the default) the driver writes `used_event = last seen used.idx` whenever it
    /// consumes used elements, asking for a call per completion as Linux does; with `off` it
    /// leaves `used_event` alone.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn set_auto_used_event(&mut self, qp: u16, rx: bool, on: bool) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        self.vrings[i].auto_used_event = on;
        Ok(())
    }

    /// Reads `used_event` (the avail ring's trailing field).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn used_event(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = self.vring(qp, rx)?.addrs.used_event();
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// Reads `avail_event` (the used ring's trailing field, written by the backend).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn avail_event(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = self.vring(qp, rx)?.addrs.avail_event();
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// Sets or clears `VRING_AVAIL_F_NO_INTERRUPT` in the avail ring's flags.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn set_no_interrupt(&mut self, qp: u16, rx: bool, on: bool) -> Result<(), DriverError> {
        let at = GuestAddress(self.vring(qp, rx)?.addrs.avail);
        let flags = if on {
            VRING_AVAIL_F_NO_INTERRUPT as u16
        } else {
            0
        };
        self.mem.store(flags.to_le(), at, Ordering::Release)?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Reads the used ring's flags (`VRING_USED_F_NO_NOTIFY`).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn used_flags(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = GuestAddress(self.vring(qp, rx)?.addrs.used);
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// Reads `used.idx`.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn used_idx(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        let at = self.vring(qp, rx)?.addrs.used_idx();
        Ok(u16::from_le(self.mem.load(at, Ordering::Acquire)?))
    }

    /// The driver's `avail.idx` (the next index it will fill).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn avail_idx(&self, qp: u16, rx: bool) -> Result<u16, DriverError> {
        Ok(self.vring(qp, rx)?.next_avail)
    }

    // ===== hostile rings =====

    /// Takes a descriptor id out of the allocator's free list, for raw use with
    /// [`TestDriver::write_desc`]; `None` if none is free. Give it back with
    /// [`TestDriver::release_desc`].
    pub fn reserve_desc(&mut self, qp: u16, rx: bool) -> Option<u16> {
        let i = self.vring_index(qp, rx).ok()?;
        self.vrings[i].free_descs.pop()
    }

    /// Returns a descriptor id taken with [`TestDriver::reserve_desc`] to the free list.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], or [`DriverError::InvalidLayout`] for an id outside
    /// the ring, already free, or held by an in-flight chain.
    pub fn release_desc(&mut self, qp: u16, rx: bool, id: u16) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        let v = &mut self.vrings[i];
        let held = v.chains.iter().flatten().any(|c| c.descs.contains(&id));
        if id >= v.addrs.size || held || v.free_descs.contains(&id) {
            return Err(DriverError::InvalidLayout(format!(
                "descriptor {id} cannot be released"
            )));
        }
        v.free_descs.push(id);
        Ok(())
    }

    /// Writes descriptor `idx` of a vring's table verbatim. Writing a descriptor held by the
    /// allocator (in flight or free) corrupts its bookkeeping: use ids from
    /// [`TestDriver::reserve_desc`], or a driver dedicated to the hostile test.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], [`DriverError::InvalidLayout`] for `idx` outside the
    /// table, or a guest memory error.
    #[allow(clippy::too_many_arguments)]
    pub fn write_desc(
        &mut self,
        qp: u16,
        rx: bool,
        idx: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) -> Result<(), DriverError> {
        let a = self.vring(qp, rx)?.addrs;
        if idx >= a.size {
            return Err(DriverError::InvalidLayout(format!(
                "descriptor {idx} outside a ring of {}",
                a.size
            )));
        }
        self.mem
            .write_slice(&desc_bytes(addr, len, flags, next), a.desc(idx))?;
        Ok(())
    }

    /// Publishes `head` in the avail ring (entry, then `Release` store of `avail.idx`) without
    /// any bookkeeping beyond remembering that `head` is raw, so its used element is kept for
    /// [`TestDriver::take_raw_used`]. Any value may be published, even one outside the ring.
    /// Does not kick.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`] or a guest memory error.
    pub fn push_avail(&mut self, qp: u16, rx: bool, head: u16) -> Result<(), DriverError> {
        let i = self.vring_index(qp, rx)?;
        if let Some(r) = self.vrings[i].raw_heads.get_mut(usize::from(head)) {
            *r = true;
        }
        self.stage_avail(i, head)?;
        self.publish_avail(i)
    }

    /// Allocates `len` bytes of guest buffer memory for raw descriptors or indirect tables;
    /// returns its GPA. 64-byte aligned.
    ///
    /// # Errors
    ///
    /// [`DriverError::OutOfMemory`].
    pub fn alloc_guest(&mut self, len: u64) -> Result<u64, DriverError> {
        Ok(self.alloc.alloc(len)?.0)
    }

    /// Frees memory from [`TestDriver::alloc_guest`] (same `gpa` and `len`).
    pub fn free_guest(&mut self, gpa: u64, len: u64) {
        let rounded = len.max(1).div_ceil(ALLOC_GRANULE) * ALLOC_GRANULE;
        self.alloc.release(gpa, rounded);
    }

    // ===== backend checks =====

    /// Records a violation, unless it repeats the previous one (a broken ring is seen again
    /// on every poll).
    pub(super) fn violation(&mut self, what: String) {
        if self.violations.last() != Some(&what) {
            self.violations.push(what);
        }
    }

    /// Spec violations noticed in the backend's behaviour so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Takes the recorded violations, leaving none.
    pub fn take_violations(&mut self) -> Vec<String> {
        std::mem::take(&mut self.violations)
    }
}

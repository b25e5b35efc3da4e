// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The control plane: connecting, bring-up in QEMU's order, reconnect, stop and resume,
//! negotiation results, raw protocol access and vring addressing.

use super::*;

/// Connects a Unix stream socket, retrying for [`CONNECT_RETRY`] while the path is missing or
/// refuses connections (a backend that is still starting).
pub(super) fn connect_socket(path: &Path) -> Result<UnixStream, DriverError> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                ) && start.elapsed() < CONNECT_RETRY =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(DriverError::Connect(e)),
        }
    }
}

/// The regions of `mem` as a memory table (`SET_MEM_TABLE`, `ADD_MEM_REG`).
fn region_infos(mem: &GuestMemoryMmap) -> Result<Vec<VhostUserMemoryRegionInfo>, DriverError> {
    mem.iter()
        .map(VhostUserMemoryRegionInfo::from_guest_region)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| DriverError::Request {
            request: "SET_MEM_TABLE",
            source,
        })
}

impl TestDriver {
    /// Connects to a backend listening on `path` (the backend is the server) and brings the
    /// device up. Retries for up to 2 s while the socket is missing or refuses connections.
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`].
    pub fn connect(path: &Path, opts: DriverOpts) -> Result<Self, DriverError> {
        opts.validate()?;
        Self::from_stream(connect_socket(path)?, opts)
    }

    /// Brings the device up over an already connected socket: the backend connected to us
    /// (client mode), the test accepted on its own `UnixListener` and hands the stream in.
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`].
    pub fn from_stream(sock: UnixStream, opts: DriverOpts) -> Result<Self, DriverError> {
        opts.validate()?;
        let (frontend, raw) = Self::frontend_on(sock, &opts)?;
        let (mem, memfd, vrings, alloc) = Self::build_memory(&opts)?;
        let mut drv = TestDriver {
            frontend,
            sock: raw,
            mem,
            memfd,
            opts,
            offered: 0,
            acked: 0,
            offered_proto: VhostUserProtocolFeatures::empty(),
            acked_proto: VhostUserProtocolFeatures::empty(),
            queue_num: None,
            max_mem_slots: None,
            vrings,
            alloc,
            violations: Vec::new(),
        };
        drv.bring_up()?;
        Ok(drv)
    }

    /// Wraps a connected socket in a [`Frontend`], plus a second handle for raw messages.
    pub(super) fn frontend_on(
        sock: UnixStream,
        opts: &DriverOpts,
    ) -> Result<(Frontend, UnixStream), DriverError> {
        sock.set_read_timeout(opts.reply_timeout)
            .map_err(DriverError::Socket)?;
        let raw = sock.try_clone().map_err(DriverError::Socket)?;
        let nvrings = 2 * u64::from(opts.queue_pairs);
        Ok((Frontend::from_stream(sock, nvrings), raw))
    }

    /// Drops the current connection and brings the device up again over `path`, keeping guest
    /// memory, the rings and every chain in flight, like QEMU when a backend restarts: each
    /// vring's `SET_VRING_BASE` is the `used.idx` found in guest memory, so the backend takes
    /// up again every chain made available but not used yet (transmit frames in flight may be
    /// sent twice). Kick afterwards.
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`]; the driver is then disconnected.
    pub fn reconnect(&mut self, path: &Path) -> Result<(), DriverError> {
        self.reconnect_stream(connect_socket(path)?)
    }

    /// [`TestDriver::reconnect`] over an already connected socket (client mode).
    ///
    /// # Errors
    ///
    /// Any failure of the bring-up, see [`DriverError`]; the driver is then disconnected.
    pub fn reconnect_stream(&mut self, sock: UnixStream) -> Result<(), DriverError> {
        let (frontend, raw) = Self::frontend_on(sock, &self.opts)?;
        // Replacing both handles closes the old connection.
        self.frontend = frontend;
        self.sock = raw;
        self.offered_proto = VhostUserProtocolFeatures::empty();
        self.acked_proto = VhostUserProtocolFeatures::empty();
        self.queue_num = None;
        self.max_mem_slots = None;
        for v in &mut self.vrings {
            v.stopped = false;
        }
        self.bring_up()
    }

    /// Maps guest memory and lays out the rings at the start of the first region.
    #[allow(clippy::type_complexity)]
    pub(super) fn build_memory(
        opts: &DriverOpts,
    ) -> Result<(GuestMemoryMmap, File, Vec<Vring>, BufAlloc), DriverError> {
        let file = memfd(c"vhu-test-guest", opts.mem_size).map_err(DriverError::Memfd)?;
        let region_len = if opts.split_regions {
            opts.mem_size / 2
        } else {
            opts.mem_size
        };
        let mut layout = vec![(opts.gpa_base, 0u64)];
        if opts.split_regions {
            layout.push((opts.gpa_base + region_len + REGION_GAP, region_len));
        }
        let usize_len = usize::try_from(region_len)
            .map_err(|_| DriverError::InvalidOpts("mem_size too large".into()))?;
        let mut ranges = Vec::new();
        for &(gpa, off) in &layout {
            let f = file.try_clone().map_err(DriverError::Memfd)?;
            ranges.push((GuestAddress(gpa), usize_len, Some(FileOffset::new(f, off))));
        }
        let mem =
            GuestMemoryMmap::from_ranges_with_files(&ranges).map_err(DriverError::MapMemory)?;

        // Rings: desc table, avail ring, used ring, each on its own pages.
        let n = u64::from(opts.queue_size);
        let desc_len = (DESC_SIZE * n).next_multiple_of(PAGE);
        let avail_len = (6 + 2 * n).next_multiple_of(PAGE);
        let used_len = (6 + 8 * n).next_multiple_of(PAGE);
        let per_ring = desc_len + avail_len + used_len;
        let nvrings = 2 * usize::from(opts.queue_pairs);
        let rings_len = per_ring * nvrings as u64;
        if rings_len > region_len / 2 {
            return Err(DriverError::InvalidOpts(format!(
                "rings need {rings_len} bytes, more than half of a {region_len}-byte region"
            )));
        }
        let mut vrings = Vec::with_capacity(nvrings);
        for index in 0..nvrings {
            let base = opts.gpa_base + per_ring * index as u64;
            let addrs = VringAddrs {
                desc: base,
                avail: base + desc_len,
                used: base + desc_len + avail_len,
                size: opts.queue_size,
            };
            vrings.push(Vring {
                index,
                addrs,
                kick: EventFd::new(EFD_NONBLOCK).map_err(DriverError::EventFd)?,
                call: EventFd::new(EFD_NONBLOCK).map_err(DriverError::EventFd)?,
                free_descs: (0..opts.queue_size).rev().collect(),
                chains: (0..opts.queue_size).map(|_| None).collect(),
                raw_heads: vec![false; usize::from(opts.queue_size)],
                raw_used: Vec::new(),
                next_avail: 0,
                last_used: 0,
                kicked_at: Cell::new(0),
                auto_used_event: true,
                partial: None,
                stopped: false,
            });
        }

        let mut regions = vec![(
            opts.gpa_base,
            opts.gpa_base + region_len,
            ExtentAlloc::new(opts.gpa_base + rings_len, region_len - rings_len),
        )];
        if let Some(&(gpa, _)) = layout.get(1) {
            regions.push((gpa, gpa + region_len, ExtentAlloc::new(gpa, region_len)));
        }
        Ok((mem, file, vrings, BufAlloc { regions, next: 0 }))
    }

    /// The QEMU-like bring-up sequence.
    pub(super) fn bring_up(&mut self) -> Result<(), DriverError> {
        let step = self.opts.after_request.unwrap_or(|_| ());
        step("CONNECT");
        let fe = &mut self.frontend;
        req("SET_OWNER", fe.set_owner())?;
        step("SET_OWNER");
        self.offered = req("GET_FEATURES", fe.get_features())?;
        step("GET_FEATURES");
        let has_proto = self.offered & VHOST_USER_F_PROTOCOL_FEATURES != 0;
        if has_proto {
            self.offered_proto = req("GET_PROTOCOL_FEATURES", fe.get_protocol_features())?;
            step("GET_PROTOCOL_FEATURES");
            self.acked_proto = self.offered_proto & self.opts.protocol_features;
            req(
                "SET_PROTOCOL_FEATURES",
                fe.set_protocol_features(self.acked_proto),
            )?;
            step("SET_PROTOCOL_FEATURES");
            // Only now: some backends (DPDK) answer NEED_REPLY on any message, negotiated or
            // not, while the vhost crate only waits for the ack once REPLY_ACK is acked.
            if self.opts.need_reply
                && self
                    .acked_proto
                    .contains(VhostUserProtocolFeatures::REPLY_ACK)
            {
                fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
        }
        let max_pairs = if self.acked_proto.contains(VhostUserProtocolFeatures::MQ) {
            let n = self.raw_get_queue_num()?;
            step("GET_QUEUE_NUM");
            self.queue_num = Some(n);
            n
        } else {
            1
        };
        if u64::from(self.opts.queue_pairs) > max_pairs {
            return Err(DriverError::TooManyQueuePairs {
                max: max_pairs,
                wanted: self.opts.queue_pairs,
            });
        }

        self.acked = (self.opts.features & self.offered & !UNSUPPORTED_FEATURES)
            | (self.offered & VHOST_USER_F_PROTOCOL_FEATURES);
        let fe = &mut self.frontend;
        req("SET_FEATURES", fe.set_features(self.acked))?;
        step("SET_FEATURES");

        let regions = region_infos(&self.mem)?;
        let slots = self
            .acked_proto
            .contains(VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS);
        if self.opts.mem_table == MemTableMode::AddMemReg && slots {
            let max = req("GET_MAX_MEM_SLOTS", fe.get_max_mem_slots())?;
            step("GET_MAX_MEM_SLOTS");
            self.max_mem_slots = Some(max);
            if (regions.len() as u64) > max {
                return Err(DriverError::TooManyRegions {
                    max,
                    wanted: regions.len(),
                });
            }
            for r in &regions {
                req("ADD_MEM_REG", fe.add_mem_region(r))?;
                step("ADD_MEM_REG");
            }
        } else {
            req("SET_MEM_TABLE", fe.set_mem_table(&regions))?;
            step("SET_MEM_TABLE");
        }

        for qp in 0..self.opts.queue_pairs {
            for vring in [2 * usize::from(qp), 2 * usize::from(qp) + 1] {
                self.setup_vring(vring)?;
            }
            if has_proto {
                let on = qp < self.opts.active_pairs;
                self.set_pair_enabled(qp, on)?;
                step("SET_VRING_ENABLE");
            }
        }
        Ok(())
    }

    /// `SET_VRING_NUM`, `SET_VRING_BASE`, `SET_VRING_ADDR`, `SET_VRING_KICK`,
    /// `SET_VRING_CALL` for one vring. The base is `used.idx` as found in guest memory: 0 on a
    /// fresh ring, where the backend left off on a reconnect (what QEMU restores after a
    /// backend restart).
    pub(super) fn setup_vring(&mut self, index: usize) -> Result<(), DriverError> {
        let v = &self.vrings[index];
        let base = u16::from_le(self.mem.load(v.addrs.used_idx(), Ordering::Acquire)?);
        self.setup_vring_at(index, base)
    }

    pub(super) fn setup_vring_at(&mut self, index: usize, base: u16) -> Result<(), DriverError> {
        let v = &self.vrings[index];
        let hva = |gpa: u64| -> Result<u64, DriverError> {
            Ok(self.mem.get_host_address(GuestAddress(gpa))? as u64)
        };
        let config = VringConfigData {
            queue_max_size: v.addrs.size,
            queue_size: v.addrs.size,
            flags: 0,
            desc_table_addr: hva(v.addrs.desc)?,
            used_ring_addr: hva(v.addrs.used)?,
            avail_ring_addr: hva(v.addrs.avail)?,
            log_addr: None,
        };
        let step = self.opts.after_request.unwrap_or(|_| ());
        let fe = &self.frontend;
        req("SET_VRING_NUM", fe.set_vring_num(index, v.addrs.size))?;
        step("SET_VRING_NUM");
        req("SET_VRING_BASE", fe.set_vring_base(index, base))?;
        step("SET_VRING_BASE");
        req("SET_VRING_ADDR", fe.set_vring_addr(index, &config))?;
        step("SET_VRING_ADDR");
        req("SET_VRING_KICK", fe.set_vring_kick(index, &v.kick))?;
        step("SET_VRING_KICK");
        req("SET_VRING_CALL", fe.set_vring_call(index, &v.call))?;
        step("SET_VRING_CALL");
        Ok(())
    }

    /// Sends `GET_QUEUE_NUM` on the raw socket.
    ///
    /// The vhost crate's `Frontend::get_queue_num` stores the answer as its limit on vring
    /// *indices*, but for virtio-net the answer is the number of queue *pairs* (QEMU and DPDK),
    /// so after it the crate would refuse vrings `n .. 2n`. The bytes on the wire are the same.
    pub(super) fn raw_get_queue_num(&mut self) -> Result<u64, DriverError> {
        let code = u32::from(FrontendReq::GET_QUEUE_NUM);
        self.send_raw(code, 0, &[], &[])?;
        let (rcode, flags, body) = self.recv_raw()?;
        if rcode != code || flags & VhostUserHeaderFlag::REPLY.bits() == 0 || body.len() != 8 {
            return Err(DriverError::BadReply {
                request: "GET_QUEUE_NUM",
                detail: format!("request {rcode}, flags {flags:#x}, {} bytes", body.len()),
            });
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&body);
        Ok(u64::from_le_bytes(v))
    }

    // ===== negotiation results =====

    /// The virtio features the backend offered (`GET_FEATURES`).
    pub fn offered_features(&self) -> u64 {
        self.offered
    }

    /// The virtio features the driver acked (`SET_FEATURES`).
    pub fn acked_features(&self) -> u64 {
        self.acked
    }

    /// Whether virtio feature `bit` was acked.
    pub fn has_feature(&self, bit: u32) -> bool {
        bit < 64 && self.acked & (1 << bit) != 0
    }

    /// The protocol features the driver acked (`SET_PROTOCOL_FEATURES`).
    pub fn protocol_features(&self) -> VhostUserProtocolFeatures {
        self.acked_proto
    }

    /// The protocol features the backend offered (`GET_PROTOCOL_FEATURES`).
    pub fn offered_protocol_features(&self) -> VhostUserProtocolFeatures {
        self.offered_proto
    }

    /// What `GET_QUEUE_NUM` returned, if it was sent (only with `MQ`).
    pub fn queue_num(&self) -> Option<u64> {
        self.queue_num
    }

    /// What `GET_MAX_MEM_SLOTS` returned, if it was sent ([`MemTableMode::AddMemReg`]).
    pub fn max_mem_slots(&self) -> Option<u64> {
        self.max_mem_slots
    }

    /// The options the driver was built with.
    pub fn opts(&self) -> &DriverOpts {
        &self.opts
    }

    /// Length of the virtio-net header: 12 with `VERSION_1` or `MRG_RXBUF`, else 10.
    pub fn hdr_len(&self) -> usize {
        if self.has_feature(VIRTIO_F_VERSION_1) || self.has_feature(VIRTIO_NET_F_MRG_RXBUF) {
            NET_HDR_LEN
        } else {
            NET_HDR_LEN_LEGACY
        }
    }

    /// A zeroed virtio-net header of [`TestDriver::hdr_len`] bytes (no offloads).
    pub fn zero_hdr(&self) -> Vec<u8> {
        vec![0; self.hdr_len()]
    }

    // ===== raw access =====

    /// The `vhost` crate's frontend, for protocol tests (unusual sequences, bad values).
    pub fn frontend(&mut self) -> &mut Frontend {
        &mut self.frontend
    }

    /// Guest memory.
    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// A second handle on the vhost-user socket (same connection as the frontend).
    pub fn raw_socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Sends one raw vhost-user message: a header (`request`, `flags | 1` for version 1,
    /// payload size) then `payload`, with `fds` as `SCM_RIGHTS`. Nothing is checked, so this
    /// can send malformed requests. Do not interleave with frontend calls that await a reply.
    ///
    /// # Errors
    ///
    /// [`DriverError::Socket`] if the send fails.
    pub fn send_raw(
        &self,
        request: u32,
        flags: u32,
        payload: &[u8],
        fds: &[RawFd],
    ) -> Result<(), DriverError> {
        let size = u32::try_from(payload.len())
            .map_err(|_| DriverError::Socket(io::Error::other("payload too large")))?;
        let mut msg = Vec::with_capacity(12 + payload.len());
        msg.extend_from_slice(&request.to_le_bytes());
        msg.extend_from_slice(&(flags | 1).to_le_bytes());
        msg.extend_from_slice(&size.to_le_bytes());
        msg.extend_from_slice(payload);
        let sent = self
            .sock
            .send_with_fds(&[msg.as_slice()], fds)
            .map_err(|e| DriverError::Socket(io::Error::from_raw_os_error(e.errno())))?;
        if sent != msg.len() {
            return Err(DriverError::Socket(io::Error::other("short send")));
        }
        Ok(())
    }

    /// Receives one raw message: `(request, flags, payload)`. Waits at most
    /// [`DriverOpts::reply_timeout`]. File descriptors are not collected.
    ///
    /// # Errors
    ///
    /// [`DriverError::Socket`] on EOF, timeout or a read error.
    pub fn recv_raw(&self) -> Result<(u32, u32, Vec<u8>), DriverError> {
        let mut s = &self.sock;
        let mut hdr = [0u8; 12];
        s.read_exact(&mut hdr).map_err(DriverError::Socket)?;
        let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let (code, flags, size) = (word(0), word(4), word(8));
        if size > 0x1000 {
            return Err(DriverError::Socket(io::Error::other(format!(
                "reply payload of {size} bytes"
            ))));
        }
        let mut body = vec![0u8; size as usize];
        s.read_exact(&mut body).map_err(DriverError::Socket)?;
        Ok((code, flags, body))
    }

    /// Waits up to `timeout` for the backend to close the connection (`POLLRDHUP`). Returns
    /// `false` if it is still open; data the backend sends meanwhile is left unread.
    pub fn wait_backend_hangup(&self, timeout: Duration) -> bool {
        let hup = libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match poll_fd(self.sock.as_raw_fd(), libc::POLLRDHUP, left) {
                Ok(r) if r & hup != 0 => return true,
                Ok(0) | Err(_) => return false,
                // Readable data but no hang-up yet: poll again, without spinning.
                Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            if left.is_zero() {
                return false;
            }
        }
    }

    /// Sends `SET_VRING_ENABLE` for both vrings of queue pair `qp`.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`], or the request failed.
    pub fn set_pair_enabled(&mut self, qp: u16, enable: bool) -> Result<(), DriverError> {
        let rx = self.vring_index(qp, true)?;
        for v in [rx, rx + 1] {
            req(
                "SET_VRING_ENABLE",
                self.frontend.set_vring_enable(v, enable),
            )?;
        }
        Ok(())
    }

    /// Sends `SET_VRING_CALL` for `vring`: its call eventfd (`attach`), or
    /// none (`VHOST_USER_VRING_NOFD_MASK`: a frontend that polls, or one
    /// that has not set its eventfd yet).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`], or the request failed.
    pub fn set_vring_call(&mut self, vring: usize, attach: bool) -> Result<(), DriverError> {
        let v = self
            .vrings
            .get(vring)
            .ok_or(DriverError::NoSuchVring(vring))?;
        if attach {
            req(
                "SET_VRING_CALL",
                self.frontend.set_vring_call(vring, &v.call),
            )
        } else {
            const NOFD: u64 = 0x100;
            let code = u32::from(FrontendReq::SET_VRING_CALL);
            self.send_raw(code, 0, &(vring as u64 | NOFD).to_le_bytes(), &[])?;
            // A request with a reply: the backend has handled the one
            // without when it answers.
            req("GET_FEATURES", self.frontend.get_features()).map(|_| ())
        }
    }

    /// Sends `GET_VRING_BASE`, which stops the vring; returns the backend's next avail index.
    /// The driver keeps its ring state, so buffers still in flight stay accounted for.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`], or the request failed.
    pub fn get_vring_base(&mut self, vring: usize) -> Result<u32, DriverError> {
        let v = self
            .vrings
            .get_mut(vring)
            .ok_or(DriverError::NoSuchVring(vring))?;
        let base = req("GET_VRING_BASE", self.frontend.get_vring_base(vring))?;
        v.stopped = true;
        Ok(base)
    }

    /// Starts a vring again after [`TestDriver::get_vring_base`]: `SET_VRING_NUM`,
    /// `SET_VRING_BASE base`, `SET_VRING_ADDR`, `SET_VRING_KICK`, `SET_VRING_CALL`, then
    /// `SET_VRING_ENABLE 1` when protocol features are negotiated. Pass the base
    /// `get_vring_base` returned to resume where the backend stopped. Kick afterwards.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchVring`], or a request failed.
    pub fn resume_vring(&mut self, vring: usize, base: u16) -> Result<(), DriverError> {
        if vring >= self.vrings.len() {
            return Err(DriverError::NoSuchVring(vring));
        }
        self.setup_vring_at(vring, base)?;
        if self.acked & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            req(
                "SET_VRING_ENABLE",
                self.frontend.set_vring_enable(vring, true),
            )?;
        }
        self.vrings[vring].stopped = false;
        Ok(())
    }

    /// Whether [`TestDriver::get_vring_base`] stopped the vring (and it was not resumed).
    pub fn is_stopped(&self, vring: usize) -> bool {
        self.vrings.get(vring).is_some_and(|v| v.stopped)
    }

    /// Sends the memory table again (`SET_MEM_TABLE` with the same regions, fresh fds), as a
    /// frontend does when guest memory is re-laid out; the rings keep running. With `REPLY_ACK`
    /// negotiated it returns once the backend acknowledged the new table.
    ///
    /// # Errors
    ///
    /// [`DriverError::Request`] if the backend refuses it or the connection is gone.
    pub fn resend_mem_table(&mut self) -> Result<(), DriverError> {
        let regions = region_infos(&self.mem)?;
        req("SET_MEM_TABLE", self.frontend.set_mem_table(&regions)).map(drop)
    }

    /// Truncates the memory file shared with the backend to `len` bytes, as a hostile
    /// frontend may after `SET_MEM_TABLE`: the backend's mapping of what is cut off no longer
    /// has pages behind it (an access there is a SIGBUS unless the backend recovers from it).
    /// This driver must not touch guest memory past `len` afterwards (nor may its rings and
    /// buffers lie there): its own accesses would fault the same way.
    ///
    /// # Errors
    ///
    /// The `ftruncate` error.
    pub fn truncate_memory_file(&self, len: u64) -> std::io::Result<()> {
        self.memfd.set_len(len)
    }

    /// Closes the connection (the frontend and the raw socket handle) and unmaps guest memory.
    pub fn disconnect(self) {
        drop(self);
    }

    // ===== vring addressing =====

    /// Vring index of queue pair `qp`'s receive (`rx`) or transmit queue.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn vring_index(&self, qp: u16, rx: bool) -> Result<usize, DriverError> {
        if qp >= self.opts.queue_pairs {
            return Err(DriverError::NoSuchQueuePair(qp));
        }
        Ok(2 * usize::from(qp) + usize::from(!rx))
    }

    pub(super) fn vring(&self, qp: u16, rx: bool) -> Result<&Vring, DriverError> {
        let i = self.vring_index(qp, rx)?;
        Ok(&self.vrings[i])
    }

    /// Guest-physical addresses of a vring's parts.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn vring_addrs(&self, qp: u16, rx: bool) -> Result<VringAddrs, DriverError> {
        Ok(self.vring(qp, rx)?.addrs)
    }

    /// The kick eventfd of a vring (the backend waits on it).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn kick_fd(&self, qp: u16, rx: bool) -> Result<&EventFd, DriverError> {
        Ok(&self.vring(qp, rx)?.kick)
    }

    /// The call eventfd of a vring (the backend signals it).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueuePair`].
    pub fn call_fd(&self, qp: u16, rx: bool) -> Result<&EventFd, DriverError> {
        Ok(&self.vring(qp, rx)?.call)
    }

    /// Free descriptors in a vring (0 for a queue pair that does not exist).
    pub fn free_descriptors(&self, qp: u16, rx: bool) -> usize {
        self.vring(qp, rx).map_or(0, |v| v.free_descs.len())
    }

    /// Chains made available through the allocator and not used yet (0 for a queue pair that
    /// does not exist).
    pub fn in_flight(&self, qp: u16, rx: bool) -> usize {
        self.vring(qp, rx)
            .map_or(0, |v| v.chains.iter().flatten().count())
    }
}

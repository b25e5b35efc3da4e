// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The vhost-user request handler of one port, on the `vhost` crate's
//! [`VhostUserBackendReqHandlerMut`].
//!
//! We own the handler (rather than using `vhost-user-backend`) so that one
//! handler serves any number of successive connections with a clean reset
//! between them, the data plane lives in the caller's threads, and ring
//! changes are handed over with an acknowledgement (see [`crate::queue`]).
//!
//! Every value the frontend sends is validated: vring indices against the
//! number of queues, ring sizes, addresses (translated through the memory
//! table, alignment-checked), feature bits against what was offered, memory
//! regions against overflow and overlap. An invalid request is refused: the
//! frontend gets a NACK when it asked for one (`REPLY_ACK`), and the
//! connection is closed (every ring stopped, the device reset); the port then
//! serves the next connection. It never panics the process.
//!
//! Three requests the `vhost` crate cannot serve are taken before it reads
//! them: [`intercept`].

pub(crate) mod intercept;

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{Backend, GpuBackend};
use vhost::vhost_user::{Error as VuError, Result as VuResult, VhostUserBackendReqHandlerMut};
use vhost::VhostUserMemoryRegionBase;

use crate::device::{self, bits, Negotiated, MAX_MEM_SLOTS, MAX_QUEUE_SIZE};
use crate::queue::{RingConfig, VringShared};
use crate::ring::log::LogTarget;
use crate::ring::memory::RegionDesc;
use crate::ring::{DirtyLog, GuestMemory, Layout, PackedLayout, SplitLayout, NO_DIRTY_LOG_ENV};

/// What the handler needs to know about its port.
#[derive(Debug, Clone)]
pub(crate) struct DeviceParams {
    pub name: String,
    /// Mirror of the acked features, readable without the handler's lock
    /// (the handler holds it while it waits for data-plane acks).
    pub acked_mirror: Arc<AtomicU64>,
    pub queue_pairs: u16,
    pub offered: u64,
    pub max_frame: usize,
    /// Most bytes of guest memory the port maps at once (the sum of a
    /// table's regions); larger tables are refused.
    pub max_guest_memory: u64,
    /// Memory tables and regions refused (counted for the port's owner).
    pub mem_refused: Arc<AtomicU64>,
}

#[derive(Debug)]
struct VringCtl {
    shared: Arc<VringShared>,
    size: u16,
    /// desc, avail, used guest physical addresses.
    addr: Option<(u64, u64, u64)>,
    /// Where the used ring is logged (`log_guest_addr`), when
    /// `SET_VRING_ADDR` had `VHOST_VRING_F_LOG`.
    log_addr: Option<u64>,
    /// `SET_VRING_BASE` (packed rings: both indices and wrap counters).
    base: u32,
    kick: Option<Arc<File>>,
    call: Option<Arc<File>>,
    started: bool,
    enabled: bool,
    epoch: u64,
    running: Option<Arc<RingConfig>>,
}

impl VringCtl {
    fn new(shared: Arc<VringShared>) -> Self {
        Self {
            shared,
            size: 0,
            addr: None,
            log_addr: None,
            base: 0,
            kick: None,
            call: None,
            started: false,
            enabled: false,
            epoch: 0,
            running: None,
        }
    }

    /// Stops the ring in the data plane and remembers where it stopped.
    fn stop(&mut self) {
        if self.running.take().is_some() {
            if let Some(next) = self.shared.publish(None) {
                self.base = next;
            }
        }
    }
}

/// The request handler state of one port. It outlives connections;
/// [`PortCtl::reset_connection`] returns it to the state of a new device.
#[derive(Debug)]
pub(crate) struct PortCtl {
    params: DeviceParams,
    vrings: Vec<VringCtl>,
    mem: Arc<GuestMemory>,
    acked: u64,
    acked_protocol: u64,
    owned: bool,
    next_epoch: u64,
    /// The dirty log of `SET_LOG_BASE` (on for the rings while `LOG_ALL`
    /// is acked).
    log: Option<Arc<DirtyLog>>,
}

fn invalid(why: &'static str) -> VuError {
    VuError::InvalidOperation(why)
}

impl PortCtl {
    /// Queue pairs whose two rings both run (started and enabled).
    pub(crate) fn running_pairs(&self) -> usize {
        self.vrings
            .chunks(2)
            .filter(|p| p.iter().all(|v| v.running.is_some()))
            .count()
    }

    pub(crate) fn new(params: DeviceParams, shared: Vec<Arc<VringShared>>) -> Self {
        Self {
            params,
            vrings: shared.into_iter().map(VringCtl::new).collect(),
            mem: Arc::new(GuestMemory::empty()),
            acked: 0,
            acked_protocol: 0,
            owned: false,
            next_epoch: 1,
            log: None,
        }
    }

    /// Whether the current frontend acked protocol feature `f`.
    pub(crate) fn protocol_acked(&self, f: VhostUserProtocolFeatures) -> bool {
        self.acked_protocol & f.bits() == f.bits()
    }

    /// The acked virtio features of the current connection.
    #[cfg(test)]
    pub(crate) fn acked_features(&self) -> u64 {
        self.acked
    }

    fn set_acked(&mut self, features: u64) {
        self.acked = features;
        self.params.acked_mirror.store(features, Ordering::Release);
    }

    fn vring(&mut self, index: u32) -> VuResult<&mut VringCtl> {
        self.vrings
            .get_mut(index as usize)
            .ok_or(VuError::InvalidParam)
    }

    /// Stops every ring and forgets everything the frontend set up.
    pub(crate) fn reset_connection(&mut self) {
        self.reset_rings();
        self.mem = Arc::new(GuestMemory::empty());
        self.set_acked(0);
        self.acked_protocol = 0;
        self.owned = false;
        self.log = None;
    }

    fn reset_rings(&mut self) {
        for v in &mut self.vrings {
            v.stop();
            v.size = 0;
            v.addr = None;
            v.log_addr = None;
            v.base = 0;
            v.kick = None;
            v.call = None;
            v.started = false;
            v.enabled = false;
        }
    }

    /// Publishes ring `i`'s configuration to the data plane if it changed.
    fn refresh(&mut self, i: usize) {
        let features = Negotiated::new(self.acked);
        let mem = Arc::clone(&self.mem);
        let max_frame = self.params.max_frame;
        let name = &self.params.name;
        let log = self.log.as_ref().filter(|_| features.log_all());
        let v = &mut self.vrings[i];
        let desired = match (v.started && v.enabled, v.addr) {
            (true, Some((desc, avail, used))) if v.size > 0 && mem.num_regions() > 0 => {
                let layout = if features.packed() {
                    Layout::Packed(PackedLayout {
                        desc,
                        driver: avail,
                        device: used,
                        size: v.size,
                    })
                } else {
                    Layout::Split(SplitLayout {
                        desc,
                        avail,
                        used,
                        size: v.size,
                    })
                };
                Some(RingConfig {
                    mem,
                    layout,
                    base: v.base,
                    epoch: v.epoch,
                    kick: v.kick.clone(),
                    call: v.call.clone(),
                    features,
                    max_frame,
                    log: log.map(|l| LogTarget {
                        log: Arc::clone(l),
                        used_gpa: v.log_addr.unwrap_or(used),
                    }),
                })
            }
            _ => None,
        };
        let same = match (&desired, &v.running) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                Arc::ptr_eq(&a.mem, &b.mem)
                    && a.layout == b.layout
                    && a.epoch == b.epoch
                    && a.features == b.features
                    && opt_ptr_eq(&a.kick, &b.kick)
                    && opt_ptr_eq(&a.call, &b.call)
                    && same_log(&a.log, &b.log)
            }
            _ => false,
        };
        if same {
            return;
        }
        match desired {
            None => {
                tracing::debug!("port {name}: vring {i}: stopped");
                v.stop();
            }
            Some(cfg) => {
                tracing::debug!(
                    "port {name}: vring {i}: running ({:?}, base {:#x}, epoch {})",
                    cfg.layout,
                    cfg.base,
                    cfg.epoch
                );
                let cfg = Arc::new(cfg);
                v.running = Some(Arc::clone(&cfg));
                v.shared.publish(Some(cfg));
            }
        }
    }

    fn refresh_all(&mut self) {
        for i in 0..self.vrings.len() {
            self.refresh(i);
        }
    }

    fn set_memory(&mut self, mem: GuestMemory) {
        self.mem = Arc::new(mem);
        // Running rings move to the new snapshot; the old mappings go away
        // once the data plane acknowledged and dropped its reference.
        self.refresh_all();
    }
}

fn same_log(a: &Option<LogTarget>, b: &Option<LogTarget>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(&a.log, &b.log) && a.used_gpa == b.used_gpa,
        _ => false,
    }
}

fn opt_ptr_eq(a: &Option<Arc<File>>, b: &Option<Arc<File>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

impl VhostUserBackendReqHandlerMut for PortCtl {
    fn set_owner(&mut self) -> VuResult<()> {
        if self.owned {
            return Err(invalid("already owned"));
        }
        self.owned = true;
        Ok(())
    }

    fn reset_owner(&mut self) -> VuResult<()> {
        self.reset_connection();
        Ok(())
    }

    fn reset_device(&mut self) -> VuResult<()> {
        self.reset_rings();
        self.set_acked(0);
        Ok(())
    }

    fn get_features(&mut self) -> VuResult<u64> {
        Ok(self.params.offered)
    }

    fn set_features(&mut self, features: u64) -> VuResult<()> {
        let unknown = features & !self.params.offered;
        if unknown != 0 {
            tracing::warn!(
                "port {}: frontend acked features not offered: {unknown:#x}",
                self.params.name
            );
            return Err(VuError::InvalidParam);
        }
        self.set_acked(features);
        tracing::info!(
            "port {}: features acked {features:#x} (mrg_rxbuf={} event_idx={} indirect={} version_1={})",
            self.params.name,
            features & bits::MRG_RXBUF != 0,
            features & bits::EVENT_IDX != 0,
            features & bits::INDIRECT_DESC != 0,
            features & bits::VERSION_1 != 0,
        );
        if features & bits::PROTOCOL_FEATURES == 0 {
            // Without protocol features rings start enabled (vhost-user spec,
            // "Ring states").
            for v in &mut self.vrings {
                v.enabled = true;
            }
        }
        self.refresh_all();
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy_listening: Option<bool>,
    ) -> VuResult<Option<Vec<VhostUserMemoryRegionBase>>> {
        if ctx.len() != files.len() {
            return Err(VuError::InvalidParam);
        }
        // The cap before anything is mapped: a refused table costs no
        // address space.
        GuestMemory::check_cap(
            ctx.iter().map(|r| r.memory_size),
            self.params.max_guest_memory,
        )
        .map_err(|e| self.mem_err(e))?;
        let mut regions = Vec::with_capacity(ctx.len());
        for (r, file) in ctx.iter().zip(files) {
            let desc = RegionDesc {
                gpa: r.guest_phys_addr,
                size: r.memory_size,
                vmm_va: r.user_addr,
                mmap_offset: r.mmap_offset,
            };
            regions.push(GuestMemory::map_region(desc, file).map_err(|e| self.mem_err(e))?);
        }
        let mem = GuestMemory::from_regions(regions).map_err(|e| self.mem_err(e))?;
        tracing::debug!(
            "port {}: memory table: {:?}",
            self.params.name,
            mem.regions().collect::<Vec<_>>()
        );
        self.set_memory(mem);
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> VuResult<()> {
        let epoch = self.next_epoch;
        // Packed rings may have any size; split rings need a power of two.
        let packed = Negotiated::new(self.acked).packed();
        let v = self.vring(index)?;
        if num == 0 || num > u32::from(MAX_QUEUE_SIZE) || (!packed && !num.is_power_of_two()) {
            return Err(VuError::InvalidParam);
        }
        v.size = num as u16;
        if v.running.is_some() {
            // A running ring changes size only by restarting it.
            v.stop();
            v.epoch = epoch;
            self.next_epoch += 1;
        }
        self.refresh(index as usize);
        Ok(())
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        log: u64,
    ) -> VuResult<()> {
        let mem = Arc::clone(&self.mem);
        let to_gpa = |va: u64| mem.vmm_va_to_gpa(va).ok_or(VuError::InvalidParam);
        let (d, a, u) = (to_gpa(descriptor)?, to_gpa(available)?, to_gpa(used)?);
        // Split: desc 16, avail 2, used 4. Packed: desc 16, both event
        // suppression areas 4.
        let avail_align = if Negotiated::new(self.acked).packed() {
            4
        } else {
            2
        };
        if d % 16 != 0 || a % avail_align != 0 || u % 4 != 0 {
            return Err(VuError::InvalidParam);
        }
        // The log address is a guest physical address; every mark made
        // through it is checked against the log's size.
        let log_addr = flags
            .contains(VhostUserVringAddrFlags::VHOST_VRING_F_LOG)
            .then_some(log);
        let v = self.vring(index)?;
        v.addr = Some((d, a, u));
        v.log_addr = log_addr;
        self.refresh(index as usize);
        Ok(())
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> VuResult<()> {
        let packed = Negotiated::new(self.acked).packed();
        let v = self.vring(index)?;
        // A split ring's base is a 16-bit avail index; a packed ring's packs
        // both indices and wrap counters (checked against the size at start).
        if !packed && base > u32::from(u16::MAX) {
            return Err(VuError::InvalidParam);
        }
        v.base = base;
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> VuResult<VhostUserVringState> {
        let v = self.vring(index)?;
        v.stop();
        v.started = false;
        v.kick = None;
        v.call = None;
        Ok(VhostUserVringState::new(index, v.base))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        let epoch = self.next_epoch;
        let v = self.vring(u32::from(index))?;
        v.kick = fd.map(Arc::new);
        if !v.started {
            v.started = true;
            v.epoch = epoch;
            self.next_epoch += 1;
        }
        self.refresh(usize::from(index));
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        let v = self.vring(u32::from(index))?;
        v.call = fd.map(Arc::new);
        self.refresh(usize::from(index));
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, _fd: Option<File>) -> VuResult<()> {
        self.vring(u32::from(index))?;
        Ok(())
    }

    fn get_protocol_features(&mut self) -> VuResult<VhostUserProtocolFeatures> {
        Ok(device::offered_protocol_features())
    }

    fn set_protocol_features(&mut self, features: u64) -> VuResult<()> {
        if features & !device::offered_protocol_features().bits() != 0 {
            return Err(VuError::InvalidParam);
        }
        self.acked_protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> VuResult<u64> {
        // For virtio-net, the number of queue pairs (what QEMU's
        // `queues=` and DPDK's virtio-user compare against).
        Ok(u64::from(self.params.queue_pairs))
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> VuResult<()> {
        let v = self.vring(index)?;
        v.enabled = enable;
        self.refresh(index as usize);
        Ok(())
    }

    fn get_config(
        &mut self,
        _offset: u32,
        _size: u32,
        _flags: VhostUserConfigFlags,
    ) -> VuResult<Vec<u8>> {
        Err(invalid("config space is the frontend's"))
    }

    fn set_config(
        &mut self,
        _offset: u32,
        _buf: &[u8],
        _flags: VhostUserConfigFlags,
    ) -> VuResult<()> {
        Err(invalid("config space is the frontend's"))
    }

    fn set_backend_req_fd(&mut self, _backend: Backend) {}

    fn set_gpu_socket(&mut self, _gpu_backend: GpuBackend) -> VuResult<()> {
        Err(invalid("not a GPU"))
    }

    fn get_shared_object(&mut self, _uuid: VhostUserSharedMsg) -> VuResult<File> {
        Err(invalid("no shared objects"))
    }

    fn get_inflight_fd(
        &mut self,
        _inflight: &VhostUserInflight,
    ) -> VuResult<(VhostUserInflight, File)> {
        Err(invalid("inflight tracking not offered"))
    }

    fn set_inflight_fd(&mut self, _inflight: &VhostUserInflight, _file: File) -> VuResult<()> {
        Err(invalid("inflight tracking not offered"))
    }

    fn get_max_mem_slots(&mut self) -> VuResult<u64> {
        Ok(MAX_MEM_SLOTS)
    }

    fn add_mem_region(
        &mut self,
        region: &VhostUserSingleMemoryRegion,
        fd: File,
        _postcopy_listening: Option<bool>,
    ) -> VuResult<Option<VhostUserMemoryRegionBase>> {
        let desc = RegionDesc {
            gpa: region.guest_phys_addr,
            size: region.memory_size,
            vmm_va: region.user_addr,
            mmap_offset: region.mmap_offset,
        };
        let have = self.mem.regions().map(|(_, len, _, _)| len);
        GuestMemory::check_cap(
            have.chain(std::iter::once(desc.size)),
            self.params.max_guest_memory,
        )
        .map_err(|e| self.mem_err(e))?;
        let r = GuestMemory::map_region(desc, fd).map_err(|e| self.mem_err(e))?;
        let mem = self.mem.with_region(r).map_err(|e| self.mem_err(e))?;
        self.set_memory(mem);
        Ok(None)
    }

    fn remove_mem_region(&mut self, region: &VhostUserSingleMemoryRegion) -> VuResult<()> {
        let mem = self
            .mem
            .without_region(region.guest_phys_addr, region.memory_size)
            .map_err(|e| self.mem_err(e))?;
        self.set_memory(mem);
        Ok(())
    }

    fn set_device_state_fd(
        &mut self,
        _direction: VhostTransferStateDirection,
        _phase: VhostTransferStatePhase,
        _fd: File,
    ) -> VuResult<Option<File>> {
        Err(invalid("device state transfer not offered"))
    }

    fn check_device_state(&mut self) -> VuResult<()> {
        Err(invalid("device state transfer not offered"))
    }

    fn get_shmem_config(&mut self) -> VuResult<VhostUserShMemConfig> {
        Err(invalid("no shared memory regions"))
    }

    fn set_log_base(&mut self, log: &VhostUserLog, file: File) -> VuResult<()> {
        let (size, offset) = (log.mmap_size, log.mmap_offset);
        let map = DirtyLog::map(&file, size, offset).map_err(|e| {
            self.params.mem_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "port {}: dirty log refused (size {size:#x}, offset {offset:#x}): {e}",
                self.params.name
            );
            VuError::InvalidParam
        })?;
        if std::env::var_os(NO_DIRTY_LOG_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
            tracing::warn!(
                "port {}: {NO_DIRTY_LOG_ENV} is set: the dirty log is accepted but never \
                 marked; a migrated guest will see stale memory",
                self.params.name
            );
            self.log = None;
        } else {
            tracing::info!(
                "port {}: dirty log of {size} bytes (logging {})",
                self.params.name,
                if Negotiated::new(self.acked).log_all() {
                    "on"
                } else {
                    "off until LOG_ALL"
                }
            );
            self.log = Some(Arc::new(map));
        }
        // The rings switch to the new log at their next burst boundary; each
        // hand-off waits at most ACK_TIMEOUT, so the reply never hangs.
        self.refresh_all();
        Ok(())
    }
}

impl PortCtl {
    /// Logs and counts a refused memory table or region; the frontend gets
    /// a NACK (with `REPLY_ACK`) and the connection is closed, the port
    /// serves the next one.
    fn mem_err(&self, e: crate::ring::MemoryError) -> VuError {
        self.params.mem_refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "port {}: memory table refused: {}",
            self.params.name,
            crate::error_chain(&e)
        );
        VuError::InvalidParam
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Offloads;

    fn ctl(pairs: u16) -> (PortCtl, Vec<Arc<VringShared>>) {
        let shared: Vec<_> = (0..pairs * 2)
            .map(|_| Arc::new(VringShared::new().unwrap()))
            .collect();
        let params = DeviceParams {
            name: "t".into(),
            acked_mirror: Arc::default(),
            queue_pairs: pairs,
            offered: device::offered_features(pairs, Offloads::checksum(), None),
            max_frame: crate::device::MAX_FRAME_LEN,
            max_guest_memory: crate::port::DEFAULT_MAX_GUEST_MEMORY,
            mem_refused: Arc::default(),
        };
        (PortCtl::new(params, shared.clone()), shared)
    }

    fn guest_file(size: u64) -> (tempdir::Dir, File) {
        let dir = tempdir::Dir::new();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.0.join("mem"))
            .unwrap();
        f.set_len(size).unwrap();
        (dir, f)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "vhu-ctl-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const GPA: u64 = 0x1_0000_0000;
    const VA: u64 = 0x7f00_0000_0000;
    const SIZE: u64 = 1 << 20;

    fn region() -> VhostUserMemoryRegion {
        VhostUserMemoryRegion::new(GPA, SIZE, VA, 0)
    }

    /// Places ring `index` at the start of the guest memory of [`region`]:
    /// descriptor table at `VA`, available ring at `VA + 0x1000`, used ring
    /// at `VA + 0x2000`.
    fn set_ring_at_start(c: &mut PortCtl, index: u32) -> VuResult<()> {
        c.set_vring_addr(
            index,
            VhostUserVringAddrFlags::empty(),
            VA,
            VA + 0x2000,
            VA + 0x1000,
            0,
        )
    }

    #[test]
    fn features_outside_the_offer_are_refused() {
        let (mut c, _) = ctl(1);
        let offered = c.get_features().unwrap();
        assert!(
            c.set_features(offered | bits::MQ).is_err(),
            "MQ not offered with 1 pair"
        );
        assert!(c.set_features(offered | (1 << 63)).is_err());
        assert!(c.set_features(offered).is_ok());
        assert_eq!(c.acked_features(), offered);
        // Renegotiation to a smaller set is allowed.
        assert!(c.set_features(bits::VERSION_1).is_ok());
        assert_eq!(c.acked_features(), bits::VERSION_1);
    }

    #[test]
    fn protocol_features_outside_the_offer_are_refused() {
        let (mut c, _) = ctl(1);
        let p = c.get_protocol_features().unwrap();
        assert!(c.set_protocol_features(p.bits()).is_ok());
        assert!(c
            .set_protocol_features(VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits())
            .is_err());
        assert_eq!(c.get_max_mem_slots().unwrap(), 509);
    }

    #[test]
    fn queue_pair_and_vring_bounds() {
        let (mut c, _) = ctl(16);
        assert_eq!(c.get_queue_num().unwrap(), 16);
        assert!(c.set_vring_num(31, 256).is_ok());
        assert!(c.set_vring_num(32, 256).is_err(), "vring 32 of 16 pairs");
        assert!(c.set_vring_kick(32, None).is_err());
        assert!(c.set_vring_call(200, None).is_err());
        assert!(c.set_vring_enable(32, true).is_err());
        assert!(c.get_vring_base(32).is_err());
        for bad in [0, 3, 100, 65536, u32::MAX] {
            assert!(c.set_vring_num(0, bad).is_err(), "size {bad}");
        }
        for good in [1, 2, 256, 32768] {
            assert!(c.set_vring_num(0, good).is_ok(), "size {good}");
        }
        assert!(
            c.set_vring_base(0, 70000).is_err(),
            "split ring base is 16 bits"
        );
    }

    #[test]
    fn ring_addresses_are_translated_and_checked() {
        let (mut c, _) = ctl(1);
        assert!(set_ring_at_start(&mut c, 0).is_err(), "no memory table yet");
        let (_d, f) = guest_file(SIZE);
        c.set_mem_table(&[region()], vec![f], None).unwrap();
        assert!(set_ring_at_start(&mut c, 0).is_ok());
        assert!(
            c.set_vring_addr(
                0,
                VhostUserVringAddrFlags::empty(),
                VA + 8,
                VA + 0x2000,
                VA + 0x1000,
                0
            )
            .is_err(),
            "misaligned descriptor table"
        );
        assert!(
            c.set_vring_addr(0, VhostUserVringAddrFlags::empty(), VA + SIZE, VA, VA, 0)
                .is_err(),
            "outside the table"
        );
    }

    #[test]
    fn memory_tables_are_validated() {
        let (mut c, _) = ctl(1);
        let (_d, f1) = guest_file(SIZE);
        let (_d2, f2) = guest_file(SIZE);
        let overlap = VhostUserMemoryRegion::new(GPA + 0x1000, SIZE, VA + 2 * SIZE, 0);
        assert!(c
            .set_mem_table(&[region(), overlap], vec![f1, f2], None)
            .is_err());
        let (_d3, f3) = guest_file(SIZE);
        let empty = VhostUserMemoryRegion::new(GPA, 0, VA, 0);
        assert!(c.set_mem_table(&[empty], vec![f3], None).is_err());
        let (_d4, f4) = guest_file(SIZE);
        let wraps = VhostUserMemoryRegion::new(u64::MAX - 10, SIZE, VA, 0);
        assert!(c.set_mem_table(&[wraps], vec![f4], None).is_err());
        // Hotplug: add then remove a region.
        let (_d5, f5) = guest_file(SIZE);
        c.set_mem_table(&[region()], vec![f5], None).unwrap();
        let (_d6, f6) = guest_file(SIZE);
        let extra = VhostUserSingleMemoryRegion::new(GPA + 4 * SIZE, SIZE, VA + 4 * SIZE, 0);
        c.add_mem_region(&extra, f6, None).unwrap();
        assert_eq!(c.mem.num_regions(), 2);
        c.remove_mem_region(&extra).unwrap();
        assert_eq!(c.mem.num_regions(), 1);
        assert!(c.remove_mem_region(&extra).is_err(), "already removed");
    }

    /// A table larger than the port's cap is refused before anything is
    /// mapped (a frontend asking for 1 TiB costs no address space), and
    /// counted; hotplug counts the regions already mapped. Memory fds that
    /// are not regular files are refused the same way.
    #[test]
    fn memory_over_the_cap_or_of_the_wrong_type_is_refused_and_counted() {
        let (mut c, _) = ctl(1);
        c.params.max_guest_memory = 2 * SIZE;
        let refused = Arc::clone(&c.params.mem_refused);
        // 1 TiB in a file of SIZE bytes: without the cap this would reach
        // the file-size check only after reserving the address space.
        let (_d, f) = guest_file(SIZE);
        let huge = VhostUserMemoryRegion::new(GPA, 1 << 40, VA, 0);
        assert!(c.set_mem_table(&[huge], vec![f], None).is_err());
        assert_eq!(refused.load(Ordering::Relaxed), 1);
        // Two regions of SIZE fit, a third added later does not.
        let (_d1, f1) = guest_file(SIZE);
        let (_d2, f2) = guest_file(SIZE);
        let second = VhostUserMemoryRegion::new(GPA + 2 * SIZE, SIZE, VA + 2 * SIZE, 0);
        c.set_mem_table(&[region(), second], vec![f1, f2], None)
            .unwrap();
        let (_d3, f3) = guest_file(SIZE);
        let third = VhostUserSingleMemoryRegion::new(GPA + 4 * SIZE, SIZE, VA + 4 * SIZE, 0);
        assert!(c.add_mem_region(&third, f3, None).is_err());
        assert_eq!(c.mem.num_regions(), 2, "the table stays as it was");
        assert_eq!(refused.load(Ordering::Relaxed), 2);
        // /dev/zero as guest memory: shared anonymous memory charged to the
        // switch, refused.
        let zero = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        assert!(c.set_mem_table(&[region()], vec![zero], None).is_err());
        assert_eq!(refused.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn reset_forgets_the_connection() {
        let (mut c, shared) = ctl(1);
        c.set_owner().unwrap();
        assert!(c.set_owner().is_err(), "second SET_OWNER");
        let (_d, f) = guest_file(SIZE);
        c.set_mem_table(&[region()], vec![f], None).unwrap();
        let offered = c.get_features().unwrap();
        c.set_features(offered).unwrap();
        c.set_vring_num(0, 256).unwrap();
        set_ring_at_start(&mut c, 0).unwrap();
        c.set_vring_base(0, 5).unwrap();
        c.set_vring_kick(0, None).unwrap();
        c.set_vring_enable(0, true).unwrap();
        assert!(c.vrings[0].running.is_some(), "started and enabled");
        assert_eq!(c.vrings[0].running.as_ref().unwrap().base, 5);
        // Disabling stops it; GET_VRING_BASE reports the base (no data plane
        // attached consumed anything).
        c.set_vring_enable(0, false).unwrap();
        assert!(c.vrings[0].running.is_none());
        let state = c.get_vring_base(0).unwrap();
        assert_eq!({ state.num }, 5);
        c.reset_connection();
        assert_eq!(c.acked_features(), 0);
        assert_eq!(c.mem.num_regions(), 0);
        assert!(c.vrings.iter().all(|v| v.running.is_none() && !v.started));
        assert!(c.set_owner().is_ok(), "a new connection may own the device");
        drop(shared);
    }

    #[test]
    fn without_protocol_features_rings_start_enabled() {
        let (mut c, _) = ctl(1);
        let (_d, f) = guest_file(SIZE);
        c.set_mem_table(&[region()], vec![f], None).unwrap();
        c.set_features(bits::VERSION_1).unwrap();
        c.set_vring_num(1, 64).unwrap();
        set_ring_at_start(&mut c, 1).unwrap();
        c.set_vring_kick(1, None).unwrap();
        assert!(c.vrings[1].running.is_some());
    }

    #[test]
    fn the_dirty_log_follows_set_log_base_and_log_all() {
        let (mut c, _) = ctl(1);
        let (_d, f) = guest_file(SIZE);
        c.set_mem_table(&[region()], vec![f], None).unwrap();
        let offered = c.get_features().unwrap();
        assert_ne!(offered & bits::LOG_ALL, 0);
        c.set_features(offered & !bits::LOG_ALL).unwrap();
        c.set_vring_num(0, 256).unwrap();
        set_ring_at_start(&mut c, 0).unwrap();
        c.set_vring_kick(0, None).unwrap();
        c.set_vring_enable(0, true).unwrap();
        let (_d2, logf) = guest_file(8192);
        // A hostile log: larger than its file, misaligned, empty.
        for (size, off) in [(8193, 0), (4096, 8), (0, 0)] {
            let (_d3, bad) = guest_file(8192);
            assert!(c.set_log_base(&VhostUserLog::new(size, off), bad).is_err());
        }
        assert!(c.log.is_none());
        c.set_log_base(&VhostUserLog::new(4096, 0), logf).unwrap();
        let running = |c: &PortCtl| c.vrings[0].running.as_ref().unwrap().log.clone();
        assert!(running(&c).is_none(), "no LOG_ALL: not logging");
        c.set_features(offered).unwrap();
        let t = running(&c).expect("LOG_ALL acked: logging");
        assert_eq!(
            t.used_gpa,
            GPA + 0x2000,
            "no VHOST_VRING_F_LOG: the used ring"
        );
        c.set_vring_addr(
            0,
            VhostUserVringAddrFlags::VHOST_VRING_F_LOG,
            VA,
            VA + 0x2000,
            VA + 0x1000,
            GPA + 0x3000,
        )
        .unwrap();
        assert_eq!(
            running(&c).unwrap().used_gpa,
            GPA + 0x3000,
            "log_guest_addr"
        );
        c.set_features(offered & !bits::LOG_ALL).unwrap();
        assert!(running(&c).is_none(), "LOG_ALL off again");
        c.reset_connection();
        assert!(c.log.is_none());
    }
}

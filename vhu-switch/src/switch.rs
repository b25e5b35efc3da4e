// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch's control plane: the port table, the FDB, persistence, and
//! the PMD threads; what the control API's handlers call ([`Control`]).
//!
//! Every change is one step, done completely or refused with nothing
//! changed: a port is built (socket, uplink) before it enters the table,
//! handed to its PMD, which acknowledges at a burst boundary, and only then
//! persisted; a failed save undoes the change.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vhost_net_backend::io::{Uplink, UplinkCounters, UplinkOffloads};
use vhost_net_backend::stats::DropCounts;
use vhost_net_backend::DropReason;
use vhu_api::view::PortFdbStats;
use vhu_api::{
    FdbAdd, FdbEntryView, MacAddr, PortKind, PortSpec, PortState, PortStats, PortView, QueueStats,
};

use crate::capture::CaptureTap;
use crate::config::{Config, PollMode as CfgPoll};
use crate::control::{Control, Refusal};
use crate::decide::{admit, Head, Ingress};
use crate::endpoint::{self, socket_path, Build, End, Handle};
use crate::fdb::{Fdb, Learned, Origin};
use crate::link::{self, Change, Detached};
use crate::metrics::{self, PmdSample, PortSample, Snapshot};
use crate::persist::Store;
use crate::pmd::{
    self, load_drops, Command, PmdHandle, PortCounters, PortDp, Removed, UplinkQueue,
};
use crate::vlan::VlanMode;
use crate::PortId;

/// How long the control plane waits for a PMD to take or give back a port
/// (it answers at its next burst boundary, or within its longest sleep
/// once woken).
const PMD_ANSWER: Duration = Duration::from_secs(5);

/// Where a port comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortOrigin {
    /// The configuration file: re-created at every start, not removable
    /// through the API.
    Config,
    /// The API: persisted.
    Api,
}

impl PortOrigin {
    fn name(self) -> &'static str {
        match self {
            PortOrigin::Config => "config",
            PortOrigin::Api => "api",
        }
    }
}

#[derive(Debug)]
struct Entry {
    id: PortId,
    spec: PortSpec,
    origin: PortOrigin,
    handle: Handle,
    counters: Arc<PortCounters>,
    capture: Arc<CaptureTap>,
    /// The PMD polling each of its queues.
    pmds: Vec<usize>,
}

#[derive(Debug, Default)]
struct State {
    ports: BTreeMap<String, Entry>,
    free: Vec<PortId>,
    next: PortId,
    /// Queues polled by each PMD.
    loads: Vec<usize>,
    /// The PMD that polls every uplink queue, while there are uplinks (see
    /// `pmd`'s module documentation), and how many uplinks there are.
    uplink_pmd: Option<(usize, usize)>,
    /// Persisted ports that could not be re-created at start, and why: kept
    /// in the state file, so that nothing is lost, and listed (down, with
    /// the error) until they are removed.
    failed: Vec<(PortSpec, String)>,
}

/// What a vhost-user port does with its frontend's `SEND_RARP` (QEMU sends
/// it on the target of a migration, for a guest that did not ack
/// `GUEST_ANNOUNCE`): the guest's address moves to the port in the FDB at
/// once, whatever port had it (the source port may still exist), and a
/// RARP announce from it is flooded in the port's VLAN (its access VLAN,
/// or a trunk's native VLAN) as if the guest had sent it: out of the
/// uplinks and every other member port, never back to the port.
///
/// Refused (counted, nothing learned, nothing sent): an address the port's
/// guest could not send from itself: not its `mac` lock, multicast or
/// zero, no VLAN for untagged frames (a trunk without a native VLAN), a
/// static entry on another port, a full table or quota.
#[derive(Debug, Clone)]
pub(crate) struct Announcer {
    name: String,
    ingress: Ingress,
    fdb: Arc<RwLock<Fdb>>,
    epoch: Instant,
    pmd: PmdHandle,
    counters: Arc<PortCounters>,
}

impl Announcer {
    /// The FDB move; the frame to flood, or `None` when refused.
    pub(crate) fn admit(&self, mac: [u8; 6]) -> Option<Box<[u8]>> {
        let shown = MacAddr(mac);
        let head = Head {
            dst: [0xff; 6],
            src: mac,
            tci: None,
        };
        let refuse = |why: &str| {
            self.counters
                .announces_refused
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!("port {:?}: announce of {shown} refused: {why}", self.name);
            None
        };
        let vlan = match admit(&self.ingress, &head) {
            Ok(v) => v,
            Err(r) => return refuse(r.name()),
        };
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let learned = self.fdb.write().unwrap_or_else(|p| p.into_inner()).learn(
            vlan,
            &mac,
            self.ingress.id,
            now,
        );
        match learned {
            Learned::LimitHit => return refuse("the FDB or the port's quota is full"),
            Learned::StaticConflict => return refuse("a static FDB entry has it on another port"),
            Learned::Moved { from } => tracing::info!(
                "port {:?}: announce of {shown}: FDB vlan {vlan} moved here from port id {from}",
                self.name
            ),
            Learned::New | Learned::Refreshed => tracing::info!(
                "port {:?}: announce of {shown}: FDB vlan {vlan} on this port",
                self.name
            ),
        }
        self.counters.announces.fetch_add(1, Ordering::Relaxed);
        Some(Box::new(vhost_net_backend::wire::rarp_announce(mac)))
    }

    /// [`Announcer::admit`], then the flood by the port's PMD. Returns
    /// whether the announce was accepted.
    pub(crate) fn announce(&self, mac: [u8; 6]) -> bool {
        let Some(frame) = self.admit(mac) else {
            return false;
        };
        let (ack, answer) = sync_channel(1);
        if !self.pmd.send(Command::Inject(self.ingress.id, frame, ack))
            || answer.recv_timeout(PMD_ANSWER).is_err()
        {
            tracing::warn!(
                "port {:?}: the announce frame was not sent (PMD did not answer)",
                self.name
            );
        }
        true
    }
}

/// Changes the log filter (the logging layer's reload handle).
pub type LogControl = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Why [`Switch::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A PMD's poller (its eventfd or epoll instance) could not be created.
    #[error("cannot create PMD {0}'s poller: {1}")]
    Poller(usize, std::io::Error),
    /// A PMD's thread could not be started.
    #[error("cannot start PMD thread {0}: {1}")]
    PmdThread(usize, std::io::Error),
    /// The thread watching the uplinks' interfaces could not be started.
    #[error("cannot start the link watcher: {0}")]
    LinkWatcher(std::io::Error),
}

/// Why [`Switch::restore`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The state file exists but cannot be read (the whole chain in the
    /// message).
    #[error("{}", endpoint::chain(.0))]
    State(crate::persist::PersistError),
}

/// The running switch.
pub struct Switch {
    cfg: Config,
    fdb: Arc<RwLock<Fdb>>,
    epoch: Instant,
    pmds: Vec<PmdHandle>,
    pmd_threads: Mutex<Vec<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
    state: Mutex<State>,
    store: Store,
    log: LogControl,
    ready: AtomicBool,
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn poll_mode(p: CfgPoll) -> vhost_net_backend::PollMode {
    match p {
        CfgPoll::Busy => vhost_net_backend::PollMode::Busy,
        CfgPoll::Adaptive => vhost_net_backend::PollMode::Adaptive,
        CfgPoll::Interrupt => vhost_net_backend::PollMode::Interrupt,
    }
}

impl Switch {
    /// Starts the PMD threads; no ports yet ([`Switch::restore`] adds them).
    ///
    /// # Errors
    /// A PMD could not be created or started.
    pub fn start(cfg: Config, log: LogControl) -> Result<Arc<Self>, StartError> {
        let fdb = Arc::new(RwLock::new(Fdb::new(cfg.fdb)));
        let epoch = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let mut pmds = Vec::new();
        let mut threads = Vec::new();
        for (i, &cpu) in cfg.pmds.iter().enumerate() {
            let (pmd, handle) = pmd::new_pmd(i, poll_mode(cfg.poll), Arc::clone(&fdb), epoch)
                .map_err(|e| StartError::Poller(i, e))?;
            let stop = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name(format!("vhu-pmd-{i}"))
                .spawn(move || {
                    if let Some(c) = cpu {
                        match vhost_net_backend::sys::pin_current_thread(c as usize) {
                            Ok(()) => tracing::info!("pmd {i}: pinned to CPU {c}"),
                            Err(e) => tracing::error!("pmd {i}: cannot pin to CPU {c}: {e}"),
                        }
                    }
                    if let Err(e) = pmd.run(&stop) {
                        tracing::error!("pmd {i}: stopped: {e}");
                    }
                })
                .map_err(|e| StartError::PmdThread(i, e))?;
            pmds.push(handle);
            threads.push(thread);
        }
        let store = Store::new(&cfg.state_dir);
        let state = State {
            loads: vec![0; pmds.len()],
            ..State::default()
        };
        let sw = Arc::new(Self {
            cfg,
            fdb,
            epoch,
            pmds,
            pmd_threads: Mutex::new(threads),
            stop,
            state: Mutex::new(state),
            store,
            log,
            ready: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&sw);
        std::thread::Builder::new()
            .name("vhu-link-watch".into())
            .spawn(move || loop {
                std::thread::sleep(link::WATCH_EVERY);
                match weak.upgrade() {
                    Some(sw) if !sw.stop.load(Ordering::Relaxed) => sw.watch_links(),
                    _ => return,
                }
            })
            .map_err(StartError::LinkWatcher)?;
        Ok(sw)
    }

    /// Creates the configured ports, then the persisted ones. A port that
    /// fails is logged and, if persisted, kept in the state file.
    ///
    /// # Errors
    /// The state file exists but cannot be read.
    pub fn restore(&self) -> Result<(), RestoreError> {
        for spec in self.cfg.ports.clone() {
            if let Err(r) = self.add(spec.clone(), PortOrigin::Config, Build::Create) {
                tracing::error!("port {:?} (configuration): {}", spec.name, r.message);
            }
        }
        let persisted = self.store.load().map_err(RestoreError::State)?;
        for spec in persisted {
            if self.lock().ports.contains_key(&spec.name) {
                tracing::warn!(
                    "port {:?}: in the configuration and in {}; the configuration wins",
                    spec.name,
                    self.store.path().display()
                );
                continue;
            }
            if let Err(r) = self.add(spec.clone(), PortOrigin::Api, Build::Restore) {
                tracing::error!(
                    "port {:?} (persisted): {}; kept in the state file, listed as down",
                    spec.name,
                    r.message
                );
                self.lock().failed.push((spec, r.message));
            }
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the PMDs and removes every port (their sockets with them).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for p in &self.pmds {
            let _ = p.wake.write(1);
        }
        let threads =
            std::mem::take(&mut *self.pmd_threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        let mut st = self.lock();
        for (name, e) in std::mem::take(&mut st.ports) {
            drop(e);
            tracing::info!("port {name:?}: closed");
        }
    }

    /// The capture point of a port.
    pub fn capture_tap(&self, name: &str) -> Option<Arc<CaptureTap>> {
        self.lock().ports.get(name).map(|e| Arc::clone(&e.capture))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fdb(&self) -> RwLockWriteGuard<'_, Fdb> {
        self.fdb.write().unwrap_or_else(|p| p.into_inner())
    }

    fn fdb_read(&self) -> RwLockReadGuard<'_, Fdb> {
        self.fdb.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Where each of a new port's `n` queues is polled: every uplink queue
    /// on the uplinks' PMD; other queues on the port's `pmd`, or each on the
    /// least loaded PMD.
    fn place(&self, st: &State, spec: &PortSpec, n: usize) -> Result<Vec<usize>, Refusal> {
        let who = format!("port {:?}", spec.name);
        if spec.kind != PortKind::VhostUser {
            let p = match (st.uplink_pmd, spec.pmd) {
                (Some((u, _)), Some(p)) if p as usize != u => {
                    return Err(Refusal::invalid(format!(
                        "{who}: pmd: every uplink is polled by one PMD in this version, and pmd {u} polls the others; omit `pmd` or give {u}"
                    )))
                }
                (Some((u, _)), _) => u,
                (None, Some(p)) => p as usize,
                (None, None) => least_loaded(&st.loads),
            };
            return Ok(vec![p; n]);
        }
        let mut loads = st.loads.clone();
        Ok((0..n)
            .map(|_| {
                let p = spec
                    .pmd
                    .map_or_else(|| least_loaded(&loads), |p| p as usize);
                loads[p] += 1;
                p
            })
            .collect())
    }

    /// Sends one command to PMD `i` and waits for its answer.
    fn ask<T>(
        &self,
        i: usize,
        make: impl FnOnce(std::sync::mpsc::SyncSender<T>) -> Command,
    ) -> Option<T> {
        let (ack, answer) = sync_channel(1);
        if !self.pmds[i].send(make(ack)) {
            return None;
        }
        answer.recv_timeout(PMD_ANSWER).ok()
    }

    /// Looks at every watched uplink's interface ([`link`]): a port whose
    /// interface went is detached (down: its frames are counted as
    /// `link_down`), one whose interface is back is opened on it again.
    /// Called every [`link::WATCH_EVERY`] by the link watcher thread.
    pub fn watch_links(&self) {
        let mut st = self.lock();
        for (name, e) in st.ports.iter_mut() {
            let Handle::Uplink(link) = &e.handle else {
                continue;
            };
            if !link.watched {
                continue;
            }
            match link.check() {
                Change::None => {}
                Change::Gone => {
                    let ups = (0..e.pmds.len())
                        .map(|q| {
                            Box::new(Detached::new(
                                format!("detached:{}:q{q}", link.ifname),
                                UplinkOffloads::default(),
                            )) as Box<dyn Uplink>
                        })
                        .collect();
                    self.swap_queues(e, ups);
                    e.counters.connected.store(false, Ordering::Relaxed);
                    if let Handle::Uplink(link) = &mut e.handle {
                        tracing::warn!(
                            "port {name:?}: interface {} is gone; the port is down until an \
                             interface of that name exists again",
                            link.ifname
                        );
                        link.ifindex = None;
                    }
                }
                Change::Back => {
                    match endpoint::build(&e.spec, &self.cfg.socket_dir, Build::Restore) {
                        Ok((End::Uplink(ups), Handle::Uplink(new)))
                            if ups.len() == e.pmds.len() =>
                        {
                            let all = self.swap_queues(e, ups);
                            e.counters.connected.store(all, Ordering::Relaxed);
                            tracing::info!(
                                "port {name:?}: interface {} is back (index {}): the port is up",
                                new.ifname,
                                new.ifindex.unwrap_or_default()
                            );
                            e.handle = Handle::Uplink(new);
                        }
                        Ok(_) => tracing::error!("port {name:?}: reopened with another shape"),
                        Err(r) => {
                            if let Handle::Uplink(link) = &mut e.handle {
                                if link.last_error.as_deref() != Some(r.message.as_str()) {
                                    tracing::warn!(
                                        "port {name:?}: interface {} exists again but cannot be \
                                     opened: {}; retrying",
                                        link.ifname,
                                        r.message
                                    );
                                    link.last_error = Some(r.message);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Hands each PMD polling a queue of uplink `e` its new queue (in
    /// queue order); drops the old ones here. Whether every PMD took its
    /// queue.
    fn swap_queues(&self, e: &Entry, ups: Vec<Box<dyn Uplink>>) -> bool {
        let mut all = true;
        for (q, (up, &p)) in ups.into_iter().zip(&e.pmds).enumerate() {
            let old = self.ask(p, |ack| Command::Reopen(e.id, q, UplinkQueue(up), ack));
            all &= matches!(old, Some(Some(_)));
            drop(old);
        }
        all
    }

    /// Takes a port out of every PMD; what they hand back is dropped here,
    /// outside the data plane.
    fn withdraw(&self, id: PortId) {
        for i in 0..self.pmds.len() {
            let r: Option<Removed> = self.ask(i, |ack| Command::Remove(id, ack));
            drop(r);
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn persist(&self, st: &State) -> Result<(), Refusal> {
        let mut specs: Vec<PortSpec> = st
            .ports
            .values()
            .filter(|e| e.origin == PortOrigin::Api)
            .map(|e| e.spec.clone())
            .collect();
        specs.extend(st.failed.iter().map(|(s, _)| s.clone()));
        self.store.save(&specs).map_err(|e| {
            Refusal::failed(format!("cannot persist the ports: {}", endpoint::chain(&e)))
        })
    }

    fn add(&self, spec: PortSpec, origin: PortOrigin, why: Build) -> Result<PortView, Refusal> {
        let mut st = self.lock();
        let who = format!("port {:?}", spec.name);
        if st.ports.contains_key(&spec.name) {
            return Err(Refusal::conflict(format!("{who} exists")));
        }
        if st.failed.iter().any(|(s, _)| s.name == spec.name) {
            return Err(Refusal::conflict(format!(
                "{who} exists (down: it could not be created again at start); remove it first"
            )));
        }
        let sock = socket_path(&spec, &self.cfg.socket_dir);
        for e in st.ports.values() {
            if sock.is_some() && socket_path(&e.spec, &self.cfg.socket_dir) == sock {
                return Err(Refusal::conflict(format!(
                    "{who}: socket {} is port {:?}'s",
                    sock.as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    e.spec.name
                )));
            }
            if spec.kind != PortKind::VhostUser
                && spec.interface.is_some()
                && e.spec.interface == spec.interface
                && e.spec.netns == spec.netns
            {
                return Err(Refusal::conflict(format!(
                    "{who}: interface {:?} is port {:?}'s",
                    spec.interface.as_deref().unwrap_or_default(),
                    e.spec.name
                )));
            }
        }
        if let Some(p) = spec.pmd {
            if p as usize >= self.cfg.pmds.len() {
                return Err(Refusal::invalid(format!(
                    "{who}: pmd: {p} is not a PMD thread (there is {}: 0-{})",
                    self.cfg.pmds.len(),
                    self.cfg.pmds.len() - 1
                )));
            }
        }
        crate::privilege::check(&spec)?;
        let (end, handle) = endpoint::build(&spec, &self.cfg.socket_dir, why)?;
        // A new pod TAP the switch made persistent goes again if the port
        // does not make it into the table.
        let undo = |st: &mut State, id| {
            st.free.push(id);
            if why == Build::Create {
                endpoint::release(&spec);
            }
        };
        let id = st.free.pop().unwrap_or_else(|| {
            st.next += 1;
            st.next - 1
        });
        let (mac_limit, flood_rate, flood_burst) = self.tenancy(&spec);
        let counters = Arc::new(PortCounters {
            flood: pmd::FloodLimiter::new(
                flood_rate,
                flood_burst,
                if flood_rate == 0 { 1 } else { pmd::tsc_hz() },
            ),
            ..PortCounters::default()
        });
        let capture = Arc::new(CaptureTap::default());
        let ingress = Ingress {
            id,
            vlan: VlanMode::from_api(spec.vlan.as_ref()),
            macs: spec.mac.iter().flatten().map(|m| m.0).collect(),
        };
        let announce_as = ingress.clone();
        let (dp, units) = PortDp::new(
            id,
            spec.name.clone(),
            ingress,
            spec.mtu,
            Arc::clone(&counters),
            Arc::clone(&capture),
            end,
        );
        let placed = match self.place(&st, &spec, units.len()) {
            Ok(p) => p,
            Err(r) => {
                undo(&mut st, id);
                return Err(r);
            }
        };
        // Its FDB quota, before any of its frames is decided (an id
        // reused from a removed port had its quota forgotten with it).
        self.fdb().set_port_limit(id, mac_limit);
        // Every PMD knows the port as a destination before any polls it.
        let mut taken = (0..self.pmds.len()).all(|i| {
            self.ask(i, |ack| Command::AddPort(Arc::clone(&dp), ack))
                .is_some()
        });
        drop(dp);
        if taken {
            for (u, &p) in units.into_iter().zip(&placed) {
                taken &= self
                    .ask(p, |ack| Command::AddUnit(Box::new(u), ack))
                    .is_some();
            }
        }
        if !taken {
            self.withdraw(id);
            undo(&mut st, id);
            return Err(Refusal::failed(format!(
                "{who}: a PMD thread did not take the port"
            )));
        }
        for &p in &placed {
            st.loads[p] += 1;
        }
        if let Handle::Guest(port, _) = &handle {
            let a = Announcer {
                name: spec.name.clone(),
                ingress: announce_as,
                fdb: Arc::clone(&self.fdb),
                epoch: self.epoch,
                pmd: PmdHandle::clone(&self.pmds[placed[0]]),
                counters: Arc::clone(&counters),
            };
            port.set_announce_handler(Arc::new(move |mac| a.announce(mac)));
        }
        if spec.kind != PortKind::VhostUser {
            let (u, n) = st.uplink_pmd.unwrap_or((placed[0], 0));
            st.uplink_pmd = Some((u, n + 1));
        }
        st.ports.insert(
            spec.name.clone(),
            Entry {
                id,
                spec: spec.clone(),
                origin,
                handle,
                counters,
                capture,
                pmds: placed,
            },
        );
        if origin == PortOrigin::Api {
            if let Err(r) = self.persist(&st) {
                drop(st);
                let _ = self.remove(&spec.name, true);
                return Err(r);
            }
        }
        tracing::info!("{who}: added ({} port, id {id})", spec.kind);
        let e = &st.ports[&spec.name];
        Ok(self.view(e))
    }

    /// A port's FDB quota, flood rate and flood burst: its own, or the
    /// switch's defaults for its kind (guest-facing ports: `fdb_max_per_port`
    /// and `flood_rate`; uplinks, which carry a whole segment: half the
    /// table and no flood limit).
    fn tenancy(&self, spec: &PortSpec) -> (usize, u32, u32) {
        let uplink = matches!(spec.kind, PortKind::AfPacket | PortKind::AfXdp);
        let mac_limit = match spec.mac_limit {
            Some(n) => n as usize,
            None if uplink => crate::fdb::default_uplink_limit(self.cfg.fdb.max_entries),
            None => self.cfg.fdb.max_per_port,
        };
        let rate = match spec.flood_rate {
            Some(r) => r,
            None if uplink => 0,
            None => self.cfg.flood_rate,
        };
        (
            mac_limit,
            rate,
            spec.flood_burst.unwrap_or(self.cfg.flood_burst),
        )
    }

    fn remove(&self, name: &str, force: bool) -> Result<(), Refusal> {
        let mut st = self.lock();
        if let Some(i) = st.failed.iter().position(|(s, _)| s.name == name) {
            let (spec, why) = st.failed.remove(i);
            if let Err(r) = self.persist(&st) {
                st.failed.insert(i, (spec, why));
                return Err(r);
            }
            endpoint::release(&spec);
            tracing::info!("port {name:?}: removed (it was down)");
            return Ok(());
        }
        let Some(e) = st.ports.get(name) else {
            return Err(Refusal::not_found(format!(
                "no port {name:?}; GET /ports lists them"
            )));
        };
        if e.origin == PortOrigin::Config && !force {
            return Err(Refusal::conflict(format!(
                "port {name:?} comes from the configuration file; remove it there and restart"
            )));
        }
        let e = st.ports.remove(name).expect("looked up above");
        // The PMDs hand the endpoint back; dropping it here closes the
        // queues and sockets outside the data plane.
        self.withdraw(e.id);
        for &p in &e.pmds {
            st.loads[p] = st.loads[p].saturating_sub(1);
        }
        if e.spec.kind != PortKind::VhostUser {
            st.uplink_pmd = match st.uplink_pmd {
                Some((u, n)) if n > 1 => Some((u, n - 1)),
                _ => None,
            };
        }
        self.fdb().remove_port(e.id);
        st.free.push(e.id);
        let persisted = e.origin == PortOrigin::Api;
        let spec = e.spec.clone();
        drop(e);
        endpoint::release(&spec);
        if persisted {
            self.persist(&st)?;
        }
        tracing::info!("port {name:?}: removed");
        Ok(())
    }

    fn view(&self, e: &Entry) -> PortView {
        let connected = connected(e);
        let (features, pairs, socket) = match &e.handle {
            Handle::Guest(p, path) => (
                p.acked_features(),
                p.running_queue_pairs() as u32,
                Some(path.display().to_string()),
            ),
            Handle::Uplink(_) => (0, u32::from(connected), None),
        };
        PortView {
            spec: e.spec.clone(),
            state: PortState {
                connected,
                features,
                queue_pairs: pairs,
                socket_path: socket,
                pmd: e.pmds.first().map_or(0, |&p| p as u32),
                origin: e.origin.name().into(),
                error: None,
            },
        }
    }

    /// A persisted port that could not be created again at start: down,
    /// with the reason.
    fn failed_view(spec: &PortSpec, error: &str) -> PortView {
        PortView {
            spec: spec.clone(),
            state: PortState {
                connected: false,
                features: 0,
                queue_pairs: 0,
                socket_path: None,
                pmd: 0,
                origin: PortOrigin::Api.name().into(),
                error: Some(error.to_owned()),
            },
        }
    }

    fn stats(&self, e: &Entry) -> PortStats {
        let sw_tx = load_drops(&e.counters.tx_drops);
        let sw_rx = load_drops(&e.counters.rx_drops);
        let mut queues = Vec::new();
        match &e.handle {
            Handle::Guest(p, _) => {
                for q in 0..e.spec.queues() as usize {
                    let rx = p.vring_counters(2 * q).unwrap_or_default();
                    let tx = p.vring_counters(2 * q + 1).unwrap_or_default();
                    let (mut rxd, mut txd) = (rx.drops, tx.drops);
                    if q == 0 {
                        // The switch's own drops (decisions, MTU) are
                        // counted on queue 0.
                        merge(&mut rxd, &sw_rx);
                        merge(&mut txd, &sw_tx);
                    }
                    queues.push(queue(
                        rx.packets, rx.bytes, tx.packets, tx.bytes, &rxd, &txd,
                    ));
                }
            }
            Handle::Uplink(_) => {
                // The port's rx is the uplink's tx (into the NIC), and back.
                let mut per_queue = e
                    .counters
                    .uplink
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                // Zeros until the PMD first publishes them.
                let n = per_queue.len().max(e.spec.queues() as usize);
                per_queue.resize_with(n, UplinkCounters::default);
                for (q, c) in per_queue.iter().enumerate() {
                    let (mut rxd, mut txd) = (c.tx_drops, c.rx_drops);
                    if q == 0 {
                        merge(&mut rxd, &sw_rx);
                        merge(&mut txd, &sw_tx);
                    }
                    queues.push(queue(
                        c.tx_packets,
                        c.tx_bytes,
                        c.rx_packets,
                        c.rx_bytes,
                        &rxd,
                        &txd,
                    ));
                }
            }
        }
        let mut total = QueueStats::default();
        for q in &queues {
            total.add(q);
        }
        if queues.is_empty() {
            total = queue(0, 0, 0, 0, &DropCounts::default(), &DropCounts::default());
        }
        let fdb = {
            let f = self.fdb_read();
            PortFdbStats {
                learned: f.learned_on(e.id) as u64,
                limit: f.port_limit(e.id) as u64,
                learn_refused: e.counters.fdb_learn_refused.load(Ordering::Relaxed),
            }
        };
        PortStats {
            port: e.spec.name.clone(),
            total,
            queues,
            fdb,
        }
    }
}

/// Whether a frontend is connected (vhost-user) or the interface is open
/// (uplinks). Lock-free: what `/metrics` reads for every port.
fn connected(e: &Entry) -> bool {
    match &e.handle {
        Handle::Guest(p, _) => p.is_connected(),
        Handle::Uplink(_) => e.counters.connected.load(Ordering::Relaxed),
    }
}

/// The PMD polling the fewest queues (the first of equals).
fn least_loaded(loads: &[usize]) -> usize {
    (0..loads.len()).min_by_key(|&i| loads[i]).unwrap_or(0)
}

fn merge(into: &mut DropCounts, from: &DropCounts) {
    for (r, n) in from.iter() {
        into.add(r, n);
    }
}

fn drop_map(d: &DropCounts) -> BTreeMap<String, u64> {
    DropReason::ALL
        .iter()
        .map(|r| (r.name().to_owned(), d.get(*r)))
        .collect()
}

fn queue(rxp: u64, rxb: u64, txp: u64, txb: u64, rxd: &DropCounts, txd: &DropCounts) -> QueueStats {
    QueueStats {
        rx_packets: rxp,
        tx_packets: txp,
        rx_bytes: rxb,
        tx_bytes: txb,
        rx_dropped: drop_map(rxd),
        tx_dropped: drop_map(txd),
    }
}

impl Control for Switch {
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn ports(&self) -> Vec<PortView> {
        let st = self.lock();
        let mut all: Vec<PortView> = st.ports.values().map(|e| self.view(e)).collect();
        all.extend(st.failed.iter().map(|(s, m)| Self::failed_view(s, m)));
        all.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        all
    }

    fn port(&self, name: &str) -> Option<PortView> {
        let st = self.lock();
        st.ports.get(name).map(|e| self.view(e)).or_else(|| {
            st.failed
                .iter()
                .find(|(s, _)| s.name == name)
                .map(|(s, m)| Self::failed_view(s, m))
        })
    }

    fn add_port(&self, spec: PortSpec) -> Result<PortView, Refusal> {
        self.add(spec, PortOrigin::Api, Build::Create)
    }

    fn remove_port(&self, name: &str) -> Result<(), Refusal> {
        self.remove(name, false)
    }

    fn port_stats(&self, name: &str) -> Option<PortStats> {
        let st = self.lock();
        st.ports.get(name).map(|e| self.stats(e))
    }

    fn fdb(&self) -> Vec<FdbEntryView> {
        let names: BTreeMap<PortId, String> = {
            let st = self.lock();
            st.ports
                .values()
                .map(|e| (e.id, e.spec.name.clone()))
                .collect()
        };
        let now = self.now();
        self.fdb_read()
            .entries(now)
            .into_iter()
            .filter_map(|e| {
                Some(FdbEntryView {
                    vlan: e.vlan,
                    mac: MacAddr(e.mac),
                    port: names.get(&e.port)?.clone(),
                    is_static: e.origin == Origin::Static,
                    age_secs: e.age_ms / 1000,
                })
            })
            .collect()
    }

    fn fdb_add(&self, a: FdbAdd) -> Result<FdbEntryView, Refusal> {
        let st = self.lock();
        let Some(e) = st.ports.get(&a.port) else {
            return Err(Refusal::not_found(format!(
                "no port {:?}; GET /ports lists them",
                a.port
            )));
        };
        let vlan = u16::try_from(a.vlan).unwrap_or(u16::MAX);
        Switch::fdb(self)
            .add_static(vlan, &a.mac.0, e.id)
            .map_err(|_| {
                Refusal::conflict("the FDB is full; flush learned entries or raise fdb_max_entries")
            })?;
        tracing::info!("fdb: static {} vlan {vlan} on port {:?}", a.mac, a.port);
        Ok(FdbEntryView {
            vlan,
            mac: a.mac,
            port: a.port,
            is_static: true,
            age_secs: 0,
        })
    }

    fn fdb_flush(&self) -> u64 {
        let n = Switch::fdb(self).flush_learned() as u64;
        tracing::info!("fdb: {n} learned entries flushed");
        n
    }

    fn metrics(&self) -> String {
        let ports = {
            let st = self.lock();
            st.ports
                .values()
                .map(|e| {
                    let stats = self.stats(e);
                    PortSample {
                        name: e.spec.name.clone(),
                        kind: e.spec.kind.to_string(),
                        connected: connected(e),
                        announces: e.counters.announces.load(Ordering::Relaxed),
                        announces_refused: e.counters.announces_refused.load(Ordering::Relaxed),
                        queues: stats.queues,
                        fdb: stats.fdb,
                    }
                })
                .collect()
        };
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let (fdb_entries, fdb) = {
            let f = self.fdb_read();
            (f.len() as u64, f.counters())
        };
        let pmds = self
            .pmds
            .iter()
            .enumerate()
            .map(|(i, h)| PmdSample {
                id: i,
                busy_cycles: ld(&h.counters.busy_cycles),
                idle_cycles: ld(&h.counters.idle_cycles),
                frames: ld(&h.counters.frames),
                busy_rounds: ld(&h.counters.busy_rounds),
            })
            .collect();
        metrics::render(&Snapshot {
            ports,
            pmds,
            fdb_entries,
            fdb,
            guest_memory_faults: vhost_net_backend::sys::sigbus::faults(),
        })
    }

    fn set_log_level(&self, filter: &str) -> Result<(), Refusal> {
        (self.log)(filter).map_err(Refusal::invalid)?;
        tracing::info!("log filter set to {filter:?}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fdb::FdbConfig;
    use crate::fixtures::{add_uplink_port, hand_pmd, PortParts};
    use vhost_net_backend::test_utils::ScriptedUplink;

    const VM: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x21];

    /// Each port's uplink, holding what the port received.
    type Received = Vec<ScriptedUplink>;

    /// Ports 0-4 on one PMD (run by hand): 0 the migration's source, 1 its
    /// target, 2 another member of VLAN 10, 3 in VLAN 20, 4 a trunk (native
    /// 10); each port's received frames, and port 1's announcer.
    fn setup(
        target_macs: Vec<[u8; 6]>,
    ) -> (crate::pmd::Pmd, Arc<RwLock<Fdb>>, Received, Announcer) {
        let fdb = Arc::new(RwLock::new(Fdb::new(FdbConfig::default())));
        let epoch = Instant::now();
        let (mut pmd, handle) = hand_pmd(&fdb);
        let modes = [
            VlanMode::Access(10),
            VlanMode::Access(10),
            VlanMode::Access(10),
            VlanMode::Access(20),
            VlanMode::Trunk {
                allowed: crate::vlan::VlanSet::all(),
                native: Some(10),
            },
        ];
        let mut got = Vec::new();
        let mut target = None;
        for (id, vlan) in modes.into_iter().enumerate() {
            let id = id as PortId;
            let rec = ScriptedUplink::new("scripted");
            let ingress = Ingress {
                id,
                vlan,
                macs: if id == 1 { target_macs.clone() } else { vec![] },
            };
            let counters = Arc::new(PortCounters::default());
            if id == 1 {
                target = Some(Announcer {
                    name: "target".into(),
                    ingress: ingress.clone(),
                    fdb: Arc::clone(&fdb),
                    epoch,
                    pmd: handle.clone(),
                    counters: Arc::clone(&counters),
                });
            }
            let mut p = PortParts::new(ingress);
            p.counters = counters;
            add_uplink_port(&handle, p, rec.clone(), false);
            got.push(rec);
        }
        pmd.poll_once();
        (pmd, fdb, got, target.unwrap())
    }

    /// Runs port 1's announce of `mac` through the PMD; whether it was
    /// accepted.
    fn announce(pmd: &mut crate::pmd::Pmd, a: &Announcer, mac: [u8; 6]) -> bool {
        let Some(frame) = a.admit(mac) else {
            return false;
        };
        let (ack, answer) = sync_channel(1);
        assert!(a.pmd.send(Command::Inject(1, frame, ack)));
        pmd.poll_once();
        assert_eq!(answer.try_recv(), Ok(true), "the PMD did not inject");
        true
    }

    #[test]
    fn an_announce_moves_the_fdb_and_floods_the_rarp_in_the_vlan() {
        let (mut pmd, fdb, got, a) = setup(vec![]);
        // The guest is known on the source port, which still exists.
        fdb.write().unwrap().learn(10, &VM, 0, 0);
        assert!(announce(&mut pmd, &a, VM));
        assert_eq!(fdb.read().unwrap().lookup(10, &VM, 0), Some(1));
        assert_eq!(fdb.read().unwrap().counters().moved, 1);
        let rarp = vhost_net_backend::wire::rarp_announce(VM).to_vec();
        let frames: Vec<Vec<Vec<u8>>> = got.iter().map(ScriptedUplink::take_sent).collect();
        assert_eq!(
            frames,
            vec![
                vec![rarp.clone()],
                vec![],
                vec![rarp.clone()],
                vec![],
                // A trunk whose native VLAN is 10: untagged.
                vec![rarp.clone()]
            ],
            "the announce goes to VLAN 10's other ports only"
        );
        assert_eq!(a.counters.announces.load(Ordering::Relaxed), 1);
        assert_eq!(a.counters.announces_refused.load(Ordering::Relaxed), 0);
        // A second round (QEMU announces several times): the same frame,
        // the entry stays.
        assert!(announce(&mut pmd, &a, VM));
        assert_eq!(got[2].take_sent().len(), 1);
        assert_eq!(fdb.read().unwrap().lookup(10, &VM, 0), Some(1));
        assert_eq!(a.counters.announces.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn an_announce_of_an_address_the_port_may_not_use_is_refused() {
        let other = [0x52, 0x54, 0, 0, 0, 0x99];
        let (mut pmd, fdb, got, a) = setup(vec![other]);
        fdb.write().unwrap().learn(10, &VM, 0, 0);
        // Not the port's `mac` lock, multicast, zero.
        for mac in [VM, [0x01, 0, 0x5e, 0, 0, 1], [0; 6]] {
            assert!(!announce(&mut pmd, &a, mac), "{mac:?} accepted");
        }
        // A static entry elsewhere.
        fdb.write().unwrap().add_static(10, &other, 2).unwrap();
        assert!(!announce(&mut pmd, &a, other));
        assert_eq!(fdb.read().unwrap().lookup(10, &VM, 0), Some(0));
        assert_eq!(fdb.read().unwrap().lookup(10, &other, 0), Some(2));
        assert!(got.iter().all(|g| g.script().sent.is_empty()));
        assert_eq!(a.counters.announces.load(Ordering::Relaxed), 0);
        assert_eq!(a.counters.announces_refused.load(Ordering::Relaxed), 4);
    }
}

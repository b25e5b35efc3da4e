// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A vhost-user-net port: its socket, its connection lifecycle, and the
//! queue pairs handed to the data plane.
//!
//! The port runs one control thread (`vhu-ctl-<name>`) that accepts (server
//! role) or connects to (client role, with exponential backoff) the vhost-user
//! socket and serves one frontend at a time. When a frontend disconnects,
//! crashes or resets, every ring is stopped, the device state is reset, and
//! the port waits for the next connection; the process never exits because
//! a frontend went away.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use vhost::vhost_user::BackendReqHandler;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::control::intercept::{intercept, Intercept};
use crate::control::{DeviceParams, PortCtl};
use crate::device::{self, Offloads, MAX_FRAME_LEN, MAX_QUEUE_PAIRS};
use crate::queue::{QueuePair, VringShared};
use crate::stats::QueueCounters;
use crate::sys;

pub use crate::control::intercept::AnnounceHandler;

/// Who creates the vhost-user socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketRole {
    /// We create the socket and listen on it; the frontend connects.
    Server,
    /// The frontend created the socket; we connect, and reconnect with
    /// backoff whenever it goes away.
    Client,
}

/// Reconnection backoff for the client role.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay after a failed attempt.
    pub initial: Duration,
    /// Longest delay between attempts.
    pub max: Duration,
}

impl Default for Backoff {
    /// 100 ms doubling up to 2 s: a restarted VMM is picked up quickly
    /// without spinning on a socket that stays away.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

/// How to build a port.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// A name for logs and thread names.
    pub name: String,
    /// The vhost-user socket path.
    pub socket: PathBuf,
    /// Who creates the socket.
    pub role: SocketRole,
    /// Number of queue pairs (1 to [`MAX_QUEUE_PAIRS`]); more than one offers
    /// `VIRTIO_NET_F_MQ`.
    pub queue_pairs: u16,
    /// Checksum and segmentation offloads to offer.
    pub offloads: Offloads,
    /// The MTU to enforce on guest TX (offers `VIRTIO_NET_F_MTU`); `None`
    /// accepts frames up to 64 KiB.
    pub mtu: Option<u16>,
    /// Client-role reconnection backoff.
    pub backoff: Backoff,
    /// Server role: the socket's mode and owner, and whether its missing
    /// directories are created ([`sys::unix::bind_at`]).
    pub bind: sys::unix::BindOptions,
    /// Most bytes of guest memory the port maps for one frontend (the sum
    /// of its memory table's regions). A larger `SET_MEM_TABLE` or
    /// `ADD_MEM_REG` is refused before anything is mapped: NACKed, logged,
    /// counted ([`Port::memory_refusals`]), the connection closed; the
    /// port serves the next one. Default [`default_max_guest_memory`].
    pub max_guest_memory: u64,
}

/// The default of [`PortConfig::max_guest_memory`]: 512 GiB. Real VMs fit
/// (hugepage-backed NFV guests have a few to a few dozen GiB; the largest
/// general-purpose cloud instances 384-768 GiB, and those do not sit
/// behind a userspace switch), while one hostile frontend cannot take more
/// than 1/256 of the 128 TiB of user address space (47-bit x86-64): the
/// switch's own mappings stay possible with hundreds of such ports.
pub const DEFAULT_MAX_GUEST_MEMORY: u64 = 512 << 30;

static MAX_GUEST_MEMORY: AtomicU64 = AtomicU64::new(DEFAULT_MAX_GUEST_MEMORY);

/// The [`PortConfig::max_guest_memory`] that [`PortConfig::new`] gives
/// ([`DEFAULT_MAX_GUEST_MEMORY`] unless [`set_default_max_guest_memory`]
/// changed it).
pub fn default_max_guest_memory() -> u64 {
    MAX_GUEST_MEMORY.load(Ordering::Relaxed)
}

/// Sets the [`PortConfig::max_guest_memory`] of the configurations
/// [`PortConfig::new`] builds from now on (a daemon's option, set once at
/// start; ports already built keep theirs).
pub fn set_default_max_guest_memory(bytes: u64) {
    MAX_GUEST_MEMORY.store(bytes, Ordering::Relaxed);
}

impl PortConfig {
    /// A server-role port with one queue pair and no offloads.
    pub fn new(name: impl Into<String>, socket: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            socket: socket.into(),
            role: SocketRole::Server,
            queue_pairs: 1,
            offloads: Offloads::none(),
            mtu: None,
            backoff: Backoff::default(),
            bind: sys::unix::BindOptions::default(),
            max_guest_memory: default_max_guest_memory(),
        }
    }
}

/// Why a port could not be created.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The number of queue pairs is out of range.
    #[error("queue pairs must be 1 to {MAX_QUEUE_PAIRS}, got {0}")]
    QueuePairs(u16),
    /// The MTU is out of range.
    #[error("MTU must be 68 to 65535, got {0}")]
    Mtu(u16),
    /// Another process serves the socket.
    #[error("socket {0} is served by another process")]
    SocketInUse(PathBuf),
    /// The socket path exists and is not a socket.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// Creating, binding or watching the socket failed.
    #[error("cannot listen on {path}")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An internal resource (eventfd, epoll, thread) could not be created.
    #[error("cannot create port resources")]
    Resource(#[source] io::Error),
}

struct PortInner {
    name: String,
    announce: Mutex<Option<AnnounceHandler>>,
    ctl: Arc<Mutex<PortCtl>>,
    shutdown: AtomicBool,
    shutdown_evt: EventFd,
    connection: Mutex<Option<UnixStream>>,
    connected: AtomicBool,
    connections: AtomicU64,
    acked: Arc<AtomicU64>,
    mem_refused: Arc<AtomicU64>,
    vrings: Vec<Arc<VringShared>>,
}

impl std::fmt::Debug for PortInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortInner")
            .field("name", &self.name)
            .field("connected", &self.connected)
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

/// A vhost-user-net port. Dropping it stops the control thread, closes the
/// connection and (server role) removes the socket.
#[derive(Debug)]
pub struct Port {
    inner: Arc<PortInner>,
    thread: Option<JoinHandle<()>>,
    bound: Option<sys::unix::BoundSocket>,
}

impl Port {
    /// Creates the port and starts its control thread. In the server role
    /// the socket is bound before this returns (a stale socket file left by
    /// a dead process is replaced; a live one is an error).
    ///
    /// Returns the port and its queue pairs; every queue pair must be polled
    /// by some data-plane thread (or dropped).
    ///
    /// # Errors
    /// See [`PortError`].
    pub fn new(cfg: PortConfig) -> Result<(Port, Vec<QueuePair>), PortError> {
        if cfg.queue_pairs == 0 || cfg.queue_pairs > MAX_QUEUE_PAIRS {
            return Err(PortError::QueuePairs(cfg.queue_pairs));
        }
        let max_frame = match cfg.mtu {
            Some(m) if m < 68 => return Err(PortError::Mtu(m)),
            // MTU plus Ethernet and VLAN headers; GSO super-frames (with
            // TSO offered) may be larger.
            Some(m) if cfg.offloads.bits() & device::bits::HOST_TSO4 == 0 => {
                crate::wire::max_frame_for_mtu(usize::from(m))
            }
            _ => MAX_FRAME_LEN,
        };
        let nvrings = usize::from(cfg.queue_pairs) * 2;
        let vrings = (0..nvrings)
            .map(|_| VringShared::new().map(Arc::new))
            .collect::<io::Result<Vec<_>>>()
            .map_err(PortError::Resource)?;
        let acked = Arc::new(AtomicU64::new(0));
        let mem_refused = Arc::new(AtomicU64::new(0));
        let params = DeviceParams {
            name: cfg.name.clone(),
            acked_mirror: Arc::clone(&acked),
            queue_pairs: cfg.queue_pairs,
            offered: device::offered_features(cfg.queue_pairs, cfg.offloads, cfg.mtu),
            max_frame,
            max_guest_memory: cfg.max_guest_memory,
            mem_refused: Arc::clone(&mem_refused),
        };
        let ctl = Arc::new(Mutex::new(PortCtl::new(params, vrings.clone())));
        let qps = (0..cfg.queue_pairs)
            .map(|i| {
                let i2 = usize::from(i) * 2;
                QueuePair::new(i, Arc::clone(&vrings[i2]), Arc::clone(&vrings[i2 + 1]))
            })
            .collect();
        let (listener, bound) = match cfg.role {
            SocketRole::Server => {
                let (l, b) = bind_socket(&cfg.socket, &cfg.bind)?;
                (Some(l), Some(b))
            }
            SocketRole::Client => (None, None),
        };
        let inner = Arc::new(PortInner {
            name: cfg.name.clone(),
            announce: Mutex::new(None),
            ctl,
            shutdown: AtomicBool::new(false),
            shutdown_evt: EventFd::new(EFD_NONBLOCK).map_err(PortError::Resource)?,
            connection: Mutex::new(None),
            connected: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            acked,
            mem_refused,
            vrings,
        });
        let t_inner = Arc::clone(&inner);
        let socket = cfg.socket.clone();
        let backoff = cfg.backoff;
        let thread = std::thread::Builder::new()
            .name(format!("vhu-ctl-{}", cfg.name))
            .spawn(move || match listener {
                Some(l) => serve_listener(&t_inner, &l),
                None => serve_client(&t_inner, &socket, backoff),
            })
            .map_err(PortError::Resource)?;
        match cfg.role {
            SocketRole::Server => {
                tracing::info!("port {}: listening on {}", cfg.name, cfg.socket.display())
            }
            SocketRole::Client => {
                tracing::info!("port {}: connecting to {}", cfg.name, cfg.socket.display())
            }
        }
        Ok((
            Port {
                inner,
                thread: Some(thread),
                bound,
            },
            qps,
        ))
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether a frontend is connected now.
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Acquire)
    }

    /// How many frontend connections the port has served (including the
    /// current one).
    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::Acquire)
    }

    /// The virtio features the current frontend acked (0 when none).
    ///
    /// Never blocks (safe to call from a data-plane thread).
    pub fn acked_features(&self) -> u64 {
        self.inner.acked.load(Ordering::Acquire)
    }

    /// Queue pairs the current frontend started and enabled (0 when none).
    ///
    /// Takes the control thread's lock: for the control plane, not for a
    /// data-plane thread.
    pub fn running_queue_pairs(&self) -> usize {
        lock(&self.inner.ctl).running_pairs()
    }

    /// Memory tables, regions and dirty logs the port refused since it was
    /// created: over [`PortConfig::max_guest_memory`], an fd that is not a
    /// regular file or too short for its region, overlapping regions.
    pub fn memory_refusals(&self) -> u64 {
        self.inner.mem_refused.load(Ordering::Relaxed)
    }

    /// Counters of vring `index` (RX of pair `i` is `2i`, TX is `2i + 1`).
    pub fn vring_counters(&self, index: usize) -> Option<QueueCounters> {
        self.inner.vrings.get(index).map(|v| v.stats.snapshot())
    }

    /// Sets what the port does with a frontend's `SEND_RARP` (sent after a
    /// migration, on the target, for a guest that did not ack
    /// `VIRTIO_NET_F_GUEST_ANNOUNCE`). Without a handler the message is
    /// acked and ignored.
    pub fn set_announce_handler(&self, handler: AnnounceHandler) {
        *lock(&self.inner.announce) = Some(handler);
    }

    /// Stops the control thread, closes the connection, and removes the
    /// socket file (server role). Also done on drop.
    pub fn shutdown(&mut self) {
        self.inner.shutdown.store(true, Ordering::Release);
        let _ = self.inner.shutdown_evt.write(1);
        if let Some(c) = lock(&self.inner.connection).as_ref() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("port {}: control thread panicked", self.inner.name);
            }
            // Relative to the held directory, and only the socket bound.
            if let Some(b) = &self.bound {
                let _ = b.remove();
            }
        }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Binds the server socket, replacing a stale socket file, without
/// following a link a tenant put on the way ([`sys::unix::bind_at`]).
fn bind_socket(
    path: &Path,
    opts: &sys::unix::BindOptions,
) -> Result<(UnixListener, sys::unix::BoundSocket), PortError> {
    let listen = |source| PortError::Listen {
        path: path.to_owned(),
        source,
    };
    let (l, b) = sys::unix::bind_at(path, opts).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => PortError::SocketInUse(path.to_owned()),
        io::ErrorKind::AlreadyExists => PortError::NotASocket(path.to_owned()),
        _ => listen(e),
    })?;
    l.set_nonblocking(true).map_err(listen)?;
    Ok((l, b))
}

const TOKEN_SHUTDOWN: u64 = 1;
const TOKEN_LISTENER: u64 = 2;

fn serve_listener(inner: &PortInner, listener: &UnixListener) {
    let epoll = match Epoll::new().and_then(|e| {
        e.ctl(
            ControlOperation::Add,
            inner.shutdown_evt.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_SHUTDOWN),
        )?;
        e.ctl(
            ControlOperation::Add,
            listener.as_raw_fd(),
            EpollEvent::new(EventSet::IN, TOKEN_LISTENER),
        )?;
        Ok(e)
    }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("port {}: cannot watch the listener: {e}", inner.name);
            return;
        }
    };
    let mut events = [EpollEvent::default(); 2];
    while !inner.shutdown.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = stream.set_nonblocking(false) {
                    tracing::warn!("port {}: {e}", inner.name);
                    continue;
                }
                serve_connection(inner, stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Err(e) = epoll.wait(-1, &mut events) {
                    if e.kind() != io::ErrorKind::Interrupted {
                        tracing::error!("port {}: epoll: {e}", inner.name);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            Err(e) => {
                // EMFILE and friends: back off rather than spin.
                tracing::warn!("port {}: accept: {e}", inner.name);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn serve_client(inner: &PortInner, path: &Path, backoff: Backoff) {
    let mut delay = backoff.initial;
    let mut reported = false;
    while !inner.shutdown.load(Ordering::Acquire) {
        match crate::sys::unix::connect_checked(path) {
            Ok(stream) => {
                delay = backoff.initial;
                reported = false;
                serve_connection(inner, stream);
                // Whatever ended the connection, try again soon.
                wait_shutdown(inner, backoff.initial);
            }
            Err(e) => {
                if !reported {
                    tracing::info!(
                        "port {}: cannot connect to {}: {e}; retrying",
                        inner.name,
                        path.display()
                    );
                    reported = true;
                }
                wait_shutdown(inner, delay);
                delay = (delay * 2).min(backoff.max);
            }
        }
    }
}

/// Sleeps up to `d`, returning early (within 50 ms) on shutdown.
fn wait_shutdown(inner: &PortInner, d: Duration) {
    let step = Duration::from_millis(50);
    let mut left = d;
    while !left.is_zero() && !inner.shutdown.load(Ordering::Acquire) {
        let s = left.min(step);
        std::thread::sleep(s);
        left -= s;
    }
}

fn serve_connection(inner: &PortInner, stream: UnixStream) {
    let n = inner.connections.fetch_add(1, Ordering::AcqRel) + 1;
    match stream.try_clone() {
        Ok(c) => *lock(&inner.connection) = Some(c),
        Err(e) => {
            tracing::warn!("port {}: {e}", inner.name);
            return;
        }
    }
    if inner.shutdown.load(Ordering::Acquire) {
        return;
    }
    inner.connected.store(true, Ordering::Release);
    tracing::info!("port {}: frontend connected (connection {n})", inner.name);
    let peek_sock = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("port {}: {e}", inner.name);
            return;
        }
    };
    let mut handler = BackendReqHandler::from_stream(stream, Arc::clone(&inner.ctl));
    let port = Intercept {
        name: &inner.name,
        ctl: &inner.ctl,
        acked: &inner.acked,
        announce: &inner.announce,
    };
    let why = loop {
        match intercept(&port, &peek_sock) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => break e,
        }
        if let Err(e) = handler.handle_request() {
            break e;
        }
    };
    match why {
        vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage => {
            tracing::info!("port {}: frontend disconnected", inner.name)
        }
        e => tracing::warn!("port {}: closing the connection: {e}", inner.name),
    }
    *lock(&inner.connection) = None;
    lock(&inner.ctl).reset_connection();
    inner.connected.store(false, Ordering::Release);
}

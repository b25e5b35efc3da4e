// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! What can go wrong while driving a backend.

use super::*;

/// Errors of the test driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// [`DriverOpts`] cannot work.
    #[error("Invalid driver options: {0}")]
    InvalidOpts(String),
    /// `memfd_create` or sizing the memfd failed.
    #[error("Cannot create the guest memory file")]
    Memfd(#[source] io::Error),
    /// vm-memory could not map the guest memory.
    #[error("Cannot map guest memory")]
    MapMemory(#[source] vm_memory::mmap::FromRangesError),
    /// A guest memory access failed (an address outside guest memory).
    #[error("Guest memory access failed")]
    Memory(#[source] GuestMemoryError),
    /// Creating, writing or polling an eventfd failed.
    #[error("Eventfd operation failed")]
    EventFd(#[source] io::Error),
    /// Connecting the Unix socket failed.
    #[error("Cannot connect to the backend socket")]
    Connect(#[source] io::Error),
    /// A vhost-user request failed (transport error, bad reply, or a non-zero `REPLY_ACK`).
    #[error("Vhost-user request {request} failed")]
    Request {
        /// Name of the request.
        request: &'static str,
        /// What the `vhost` crate reported.
        #[source]
        source: vhost::Error,
    },
    /// The backend sent a reply the driver cannot accept.
    #[error("Bad reply to {request}: {detail}")]
    BadReply {
        /// Name of the request.
        request: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// Raw I/O on the vhost-user socket failed.
    #[error("Vhost-user socket I/O failed")]
    Socket(#[source] io::Error),
    /// The backend supports fewer queue pairs than [`DriverOpts::queue_pairs`].
    #[error("Backend supports {max} queue pairs, {wanted} requested")]
    TooManyQueuePairs {
        /// What `GET_QUEUE_NUM` returned (1 without `MQ`).
        max: u64,
        /// What the options asked for.
        wanted: u16,
    },
    /// The backend has fewer memory slots than regions to add.
    #[error("Backend has {max} memory slots, {wanted} needed")]
    TooManyRegions {
        /// What `GET_MAX_MEM_SLOTS` returned.
        max: u64,
        /// Regions of the guest memory.
        wanted: usize,
    },
    /// The queue pair does not exist.
    #[error("Queue pair {0} does not exist")]
    NoSuchQueuePair(u16),
    /// The vring does not exist.
    #[error("Vring {0} does not exist")]
    NoSuchVring(usize),
    /// The ring has too few free descriptors for the chain.
    #[error("Ring full: {needed} descriptors needed, {free} free")]
    RingFull {
        /// Descriptors the chain needs.
        needed: usize,
        /// Descriptors free in the ring.
        free: usize,
    },
    /// The buffer allocator has no room left.
    #[error("Out of guest buffer memory ({0} bytes requested)")]
    OutOfMemory(u64),
    /// The layout needs a feature that was not negotiated.
    #[error("Feature {0} was not negotiated")]
    FeatureNotAcked(&'static str),
    /// The layout does not fit the buffer or the ring.
    #[error("Invalid buffer layout: {0}")]
    InvalidLayout(String),
}

impl From<GuestMemoryError> for DriverError {
    fn from(e: GuestMemoryError) -> Self {
        DriverError::Memory(e)
    }
}

/// Maps a `vhost` result into a [`DriverError::Request`] naming the request.
pub(super) fn req<T>(request: &'static str, r: vhost::Result<T>) -> Result<T, DriverError> {
    r.map_err(|source| DriverError::Request { request, source })
}

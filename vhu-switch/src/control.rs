// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The switch as its control plane sees it: the actions the control API's
//! handlers call ([`Control`]) and why one is refused ([`Refusal`]). The
//! switch implements it (`switch`); the API (`api`) maps a refusal's
//! [`RefusalKind`] to an HTTP status, so that the switch and its ports never
//! import the HTTP layer.

use vhu_api::{FdbAdd, FdbEntryView, PortSpec, PortStats, PortView};

/// What kind of refusal: what the API answers (404, 409, 422, 500).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// No such port (or entry).
    NotFound,
    /// It clashes with what exists: a duplicate name or socket, an
    /// interface in use, a full table.
    Conflict,
    /// Invalid values, or what the host refuses (no such interface, a
    /// capability the switch does not hold).
    Invalid,
    /// The switch could not do what was valid to ask.
    Failed,
}

/// Why the switch refused an action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// What kind.
    pub kind: RefusalKind,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Refusal {
    fn new(kind: RefusalKind, m: impl Into<String>) -> Self {
        Self {
            kind,
            message: m.into(),
        }
    }
    /// [`RefusalKind::NotFound`].
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(RefusalKind::NotFound, m)
    }
    /// [`RefusalKind::Conflict`].
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(RefusalKind::Conflict, m)
    }
    /// [`RefusalKind::Invalid`].
    pub fn invalid(m: impl Into<String>) -> Self {
        Self::new(RefusalKind::Invalid, m)
    }
    /// [`RefusalKind::Failed`].
    pub fn failed(m: impl Into<String>) -> Self {
        Self::new(RefusalKind::Failed, m)
    }
}

/// What the handlers need of the switch. Each call is one atomic change:
/// done completely, or refused and nothing changed.
pub trait Control: Send + Sync {
    /// Whether the configured and persisted ports exist.
    fn ready(&self) -> bool;
    /// Every port, by name.
    fn ports(&self) -> Vec<PortView>;
    /// One port.
    fn port(&self, name: &str) -> Option<PortView>;
    /// Creates a port (already validated by [`PortSpec::validate`]).
    ///
    /// # Errors
    /// A conflict for a duplicate, invalid for what the host refuses.
    fn add_port(&self, spec: PortSpec) -> Result<PortView, Refusal>;
    /// Removes a port.
    ///
    /// # Errors
    /// Not found.
    fn remove_port(&self, name: &str) -> Result<(), Refusal>;
    /// A port's counters.
    fn port_stats(&self, name: &str) -> Option<PortStats>;
    /// The FDB.
    fn fdb(&self) -> Vec<FdbEntryView>;
    /// Adds a static FDB entry.
    ///
    /// # Errors
    /// Not found (no such port), invalid (bad values), a conflict (table
    /// full).
    fn fdb_add(&self, e: FdbAdd) -> Result<FdbEntryView, Refusal>;
    /// Removes the learned FDB entries; returns how many.
    fn fdb_flush(&self) -> u64;
    /// The Prometheus exposition.
    fn metrics(&self) -> String;
    /// Changes the log filter.
    ///
    /// # Errors
    /// Invalid, for a filter that does not parse.
    fn set_log_level(&self, filter: &str) -> Result<(), Refusal>;
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The forwarding database: `(vlan, mac) -> port`.
//!
//! * **Learning**: every frame's source address is learned on its ingress
//!   port, in its VLAN. An address seen on another port moves there at once
//!   (a VM migrated, a cable moved).
//! * **Aging**: a learned entry not refreshed within the aging time (default
//!   300 s, as 802.1D and OVS) is gone: lookups treat it as absent at once,
//!   and [`Fdb::age`] (called about once a second) frees it and counts it.
//! * **Limits**: at most `max_entries` entries in all, and per port its
//!   quota ([`Fdb::set_port_limit`]; `max_per_port` for a port without one).
//!   A new address beyond a limit is not learned (its frames still flow,
//!   flooded as unknown unicast when they are destinations) and the hit is
//!   counted: a guest that sprays source MACs fills its own quota, not the
//!   table. The default quota is a [`PORT_SHARES`]th of the table, so that
//!   it takes that many ports at their quota to fill it.
//! * **Static entries** never age and never move; learning the same address
//!   on another port is refused (counted as a limit hit would hide it, so it
//!   has its own counter).
//!
//! * **Shared by the PMD threads** behind a read-write lock, read-locked
//!   once per source burst: [`Fdb::refresh`] keeps a known address alive
//!   through `&self` (an atomic timestamp), and only new or moved addresses
//!   ([`Fdb::learn`]) need the write lock, which a PMD takes after its burst
//!   for what it collected.
//!
//! Pure: no I/O, no clock (the caller passes `now` in milliseconds of a
//! monotonic clock, sampled once per burst), no allocation after
//! [`Fdb::new`] (the table is reserved for `max_entries` up front).
//!
//! The hash is keyed with a per-table random seed: source addresses are
//! chosen by guests, so a fixed hash would let one guest craft collisions.

use std::collections::hash_map::{Entry as MapEntry, HashMap, RandomState};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::PortId;

/// Default aging time (802.1D's and OVS's).
pub const DEFAULT_AGING: Duration = Duration::from_secs(300);
/// Default table size: a few thousand addresses per node is typical; OVS's
/// default is 2,048 per bridge. Raised where a node hosts more.
pub const DEFAULT_MAX_ENTRIES: usize = 8192;
/// How many shares of the table the default per-port quota is: it takes
/// this many ports sending from fresh source addresses to fill the table,
/// not a few (issue 34: one port spraying random source MACs blocked
/// everyone's learning while the quota was an eighth of the table).
pub const PORT_SHARES: usize = 32;
/// Default per-port limit of a VM's or pod's port: a [`PORT_SHARES`]th of
/// the default table (256). A VM or pod rarely shows more than a handful of
/// source addresses; one that runs a bridge of its own (nested containers)
/// gets a larger `mac_limit`.
pub const DEFAULT_MAX_PER_PORT: usize = DEFAULT_MAX_ENTRIES / PORT_SHARES;

/// The default quota of an uplink (AF_XDP, AF_PACKET): half the table. An
/// uplink sees a whole segment, whose hosts a quota of a few hundred would
/// leave unlearned (and every frame to them flooded); half the table still
/// leaves the other half to the guests' ports.
pub const fn default_uplink_limit(max_entries: usize) -> usize {
    if max_entries / 2 == 0 {
        1
    } else {
        max_entries / 2
    }
}

/// Limits and timers of an [`Fdb`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbConfig {
    /// How long a learned entry lives without being refreshed.
    pub aging: Duration,
    /// Most entries in all (learned and static).
    pub max_entries: usize,
    /// Most learned entries per port, for a port without a quota of its own
    /// ([`Fdb::set_port_limit`]).
    pub max_per_port: usize,
}

impl Default for FdbConfig {
    fn default() -> Self {
        Self {
            aging: DEFAULT_AGING,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_per_port: DEFAULT_MAX_PER_PORT,
        }
    }
}

/// How an entry got there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Learned from a frame's source address.
    Learned,
    /// Configured; never ages, never moves.
    Static,
}

/// One entry, as [`Fdb::entries`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbEntry {
    /// VLAN (0: untagged frames of ports without a VLAN mode).
    pub vlan: u16,
    /// The address.
    pub mac: [u8; 6],
    /// Where it is.
    pub port: PortId,
    /// Learned or static.
    pub origin: Origin,
    /// Milliseconds since it was last seen (0 for static entries).
    pub age_ms: u64,
}

/// What [`Fdb::refresh`] found of a frame's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// On the ingress port already (learned or static).
    Known,
    /// A static entry on another port: the frame's own address stays
    /// there (the conflict is counted).
    StaticElsewhere,
    /// Not in the table, or learned on another port: to be learned.
    New,
}

/// What [`Fdb::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// A new entry.
    New,
    /// The entry was there, on this port: refreshed.
    Refreshed,
    /// The entry moved here from another port.
    Moved {
        /// The port it was on.
        from: PortId,
    },
    /// Not learned: the table or the port's quota is full.
    LimitHit,
    /// Not learned: a static entry puts the address on another port.
    StaticConflict,
}

/// Counters of an [`Fdb`], since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FdbCounters {
    /// Entries created by learning.
    pub learned: u64,
    /// Entries that moved to another port.
    pub moved: u64,
    /// Entries removed by aging.
    pub aged: u64,
    /// Addresses not learned because a limit was hit.
    pub limit_hits: u64,
    /// Addresses not learned because a static entry holds them elsewhere.
    pub static_conflicts: u64,
}

#[derive(Debug)]
struct Slot {
    port: PortId,
    origin: Origin,
    /// Milliseconds; refreshed through `&self` by [`Fdb::refresh`].
    last_seen: AtomicU64,
}

impl Slot {
    fn new(port: PortId, origin: Origin, now: u64) -> Self {
        Self {
            port,
            origin,
            last_seen: AtomicU64::new(now),
        }
    }

    #[inline]
    fn seen(&self) -> u64 {
        // Relaxed: a timestamp orders nothing.
        self.last_seen.load(Ordering::Relaxed)
    }
}

/// The key of `(vlan, mac)`: the VLAN in bits 48-59, the address below.
#[inline]
fn key(vlan: u16, mac: &[u8; 6]) -> u64 {
    let m = u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]]);
    (u64::from(vlan & 0x0fff) << 48) | m
}

#[inline]
fn unkey(k: u64) -> (u16, [u8; 6]) {
    let b = k.to_be_bytes();
    ((k >> 48) as u16, [b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// A hasher for the 64-bit keys: the seed mixed in, then the splitmix64
/// finalizer (a few multiplies; good avalanche for the table's low bits).
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyHasher {
    state: u64,
}

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for keys; anything else is folded in.
        for &b in bytes {
            self.state = self.state.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline]
    fn write_u64(&mut self, k: u64) {
        self.state ^= k;
    }
}

/// Builds [`KeyHasher`]s seeded per table.
#[derive(Debug, Clone, Copy)]
pub struct SeededKeys {
    seed: u64,
}

impl SeededKeys {
    fn random() -> Self {
        // std's RandomState is seeded from the OS's randomness.
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x7668_752d_6664_6221);
        Self { seed: h.finish() }
    }
}

impl BuildHasher for SeededKeys {
    type Hasher = KeyHasher;
    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { state: self.seed }
    }
}

/// The forwarding database. See the module documentation.
#[derive(Debug)]
pub struct Fdb {
    cfg: FdbConfig,
    aging_ms: u64,
    map: HashMap<u64, Slot, SeededKeys>,
    /// Learned entries per port, indexed by [`PortId`].
    per_port: Vec<usize>,
    /// Each port's quota, indexed by [`PortId`] (`None`: `max_per_port`).
    limits: Vec<Option<usize>>,
    counters: FdbCounters,
    /// Counted through `&self` by [`Fdb::refresh`].
    static_conflicts: AtomicU64,
    /// Counted through `&self` by [`Fdb::count_limit_hits`].
    limit_hits: AtomicU64,
}

impl Fdb {
    /// An empty table with room for `cfg.max_entries`.
    pub fn new(cfg: FdbConfig) -> Self {
        Self {
            cfg,
            aging_ms: u64::try_from(cfg.aging.as_millis()).unwrap_or(u64::MAX),
            map: HashMap::with_capacity_and_hasher(cfg.max_entries, SeededKeys::random()),
            per_port: Vec::new(),
            limits: Vec::new(),
            counters: FdbCounters::default(),
            static_conflicts: AtomicU64::new(0),
            limit_hits: AtomicU64::new(0),
        }
    }

    /// The limits and timers.
    pub fn config(&self) -> FdbConfig {
        self.cfg
    }

    /// Entries in the table (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Counters since creation.
    pub fn counters(&self) -> FdbCounters {
        FdbCounters {
            static_conflicts: self.counters.static_conflicts
                + self.static_conflicts.load(Ordering::Relaxed),
            limit_hits: self.counters.limit_hits + self.limit_hits.load(Ordering::Relaxed),
            ..self.counters
        }
    }

    #[inline]
    fn expired(&self, s: &Slot, now: u64) -> bool {
        s.origin == Origin::Learned && now.saturating_sub(s.seen()) >= self.aging_ms
    }

    fn port_count(&mut self, port: PortId) -> &mut usize {
        let i = port as usize;
        if i >= self.per_port.len() {
            // Grows with the port table (a control-plane event), not per
            // frame: at most once per new port index.
            self.per_port.resize(i + 1, 0);
        }
        &mut self.per_port[i]
    }

    /// Sets `port`'s quota of learned entries (a control-plane event, as the
    /// port is added; [`Fdb::remove_port`] forgets it). Entries it holds
    /// beyond a lowered quota stay until they age out.
    pub fn set_port_limit(&mut self, port: PortId, limit: usize) {
        let i = port as usize;
        if i >= self.limits.len() {
            self.limits.resize(i + 1, None);
        }
        self.limits[i] = Some(limit);
    }

    /// `port`'s quota of learned entries.
    #[inline]
    pub fn port_limit(&self, port: PortId) -> usize {
        match self.limits.get(port as usize) {
            Some(Some(l)) => *l,
            _ => self.cfg.max_per_port,
        }
    }

    /// Whether `port` holds its quota: [`Fdb::learn`] would refuse any new
    /// or moved address on it ([`Learned::LimitHit`]). What a read-locked
    /// PMD asks before it takes the write lock for a burst's new sources:
    /// a port spraying source addresses at its quota then costs no write
    /// lock.
    #[inline]
    pub fn port_full(&self, port: PortId) -> bool {
        self.learned_on(port) >= self.port_limit(port)
    }

    /// Counts `n` addresses not learned because their port held its quota
    /// ([`Fdb::port_full`]), as [`Fdb::learn`] would have.
    #[inline]
    pub fn count_limit_hits(&self, n: u64) {
        // Relaxed: a counter orders nothing.
        self.limit_hits.fetch_add(n, Ordering::Relaxed);
    }

    /// The port of `(vlan, mac)`, if known and not expired.
    ///
    /// Hot path: one hash probe, no allocation.
    #[inline]
    pub fn lookup(&self, vlan: u16, mac: &[u8; 6], now: u64) -> Option<PortId> {
        let s = self.map.get(&key(vlan, mac))?;
        (!self.expired(s, now)).then_some(s.port)
    }

    /// What a read-locked PMD does with a frame's source: when `(vlan,
    /// mac)` is already on `port` (learned: its timestamp is refreshed;
    /// static: nothing to do) it is [`Seen::Known`]; a static entry
    /// elsewhere is [`Seen::StaticElsewhere`] (the conflict is counted).
    /// Otherwise (new, or moved from another port) it is [`Seen::New`]: the
    /// caller [`Fdb::learn`]s it under the write lock, after its burst.
    ///
    /// Hot path: one hash probe; the timestamp is written at most once per
    /// millisecond per entry (a shared cache line is not dirtied per frame).
    #[inline]
    pub fn refresh(&self, vlan: u16, mac: &[u8; 6], port: PortId, now: u64) -> Seen {
        let Some(s) = self.map.get(&key(vlan, mac)) else {
            return Seen::New;
        };
        match s.origin {
            Origin::Static if s.port == port => Seen::Known,
            Origin::Static => {
                self.count_static_conflict();
                Seen::StaticElsewhere
            }
            Origin::Learned if s.port == port => {
                if s.seen() != now {
                    s.last_seen.store(now, Ordering::Relaxed);
                }
                Seen::Known
            }
            Origin::Learned => Seen::New,
        }
    }

    /// Counts a frame whose source is a static entry on another port (what
    /// [`Fdb::refresh`] does for it, for a caller that reuses its answer).
    #[inline]
    pub fn count_static_conflict(&self) {
        self.static_conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Learns that `(vlan, mac)` is on `port`.
    ///
    /// Hot path: one hash probe; an insert reuses the capacity reserved at
    /// creation.
    #[inline]
    pub fn learn(&mut self, vlan: u16, mac: &[u8; 6], port: PortId, now: u64) -> Learned {
        let k = key(vlan, mac);
        if let Some(s) = self.map.get_mut(&k) {
            match s.origin {
                Origin::Static if s.port == port => return Learned::Refreshed,
                Origin::Static => {
                    self.counters.static_conflicts += 1;
                    return Learned::StaticConflict;
                }
                Origin::Learned if s.port == port => {
                    // Expired but not swept: it lives again.
                    *s.last_seen.get_mut() = now;
                    return Learned::Refreshed;
                }
                Origin::Learned => {}
            }
        }
        self.learn_slow(k, port, now)
    }

    /// New entries and moves: the per-port quota is checked here.
    #[cold]
    fn learn_slow(&mut self, k: u64, port: PortId, now: u64) -> Learned {
        let max_per_port = self.port_limit(port);
        if *self.port_count(port) >= max_per_port {
            self.counters.limit_hits += 1;
            return Learned::LimitHit;
        }
        let full = self.map.len() >= self.cfg.max_entries;
        let slot = Slot::new(port, Origin::Learned, now);
        let res = match self.map.entry(k) {
            MapEntry::Occupied(mut o) => {
                let from = o.get().port;
                o.insert(slot);
                Some(Learned::Moved { from })
            }
            MapEntry::Vacant(v) if !full => {
                v.insert(slot);
                None
            }
            MapEntry::Vacant(_) => {
                self.counters.limit_hits += 1;
                return Learned::LimitHit;
            }
        };
        *self.port_count(port) += 1;
        match res {
            Some(Learned::Moved { from }) => {
                let c = self.port_count(from);
                *c = c.saturating_sub(1);
                self.counters.moved += 1;
                Learned::Moved { from }
            }
            _ => {
                self.counters.learned += 1;
                Learned::New
            }
        }
    }

    /// Adds (or replaces) a static entry.
    ///
    /// # Errors
    /// The table is full (a static entry is not evicting learned ones).
    pub fn add_static(&mut self, vlan: u16, mac: &[u8; 6], port: PortId) -> Result<(), FdbFull> {
        let k = key(vlan, mac);
        let slot = Slot::new(port, Origin::Static, 0);
        match self.map.get(&k).map(|s| (s.origin, s.port)) {
            Some((origin, old_port)) => {
                if origin == Origin::Learned {
                    let c = self.port_count(old_port);
                    *c = c.saturating_sub(1);
                }
                self.map.insert(k, slot);
                Ok(())
            }
            None if self.map.len() >= self.cfg.max_entries => Err(FdbFull),
            None => {
                self.map.insert(k, slot);
                Ok(())
            }
        }
    }

    /// Removes a static entry; returns whether there was one.
    pub fn remove_static(&mut self, vlan: u16, mac: &[u8; 6]) -> bool {
        let k = key(vlan, mac);
        if self.map.get(&k).is_some_and(|s| s.origin == Origin::Static) {
            self.map.remove(&k);
            true
        } else {
            false
        }
    }

    /// Removes every learned entry (static ones stay); returns how many.
    pub fn flush_learned(&mut self) -> usize {
        let before = self.map.len();
        self.map.retain(|_, s| s.origin == Origin::Static);
        self.per_port.iter_mut().for_each(|c| *c = 0);
        before - self.map.len()
    }

    /// Removes every entry (learned and static) on `port`, as when the port
    /// goes away; returns how many.
    pub fn remove_port(&mut self, port: PortId) -> usize {
        let before = self.map.len();
        self.map.retain(|_, s| s.port != port);
        if let Some(c) = self.per_port.get_mut(port as usize) {
            *c = 0;
        }
        if let Some(l) = self.limits.get_mut(port as usize) {
            *l = None;
        }
        before - self.map.len()
    }

    /// Frees the learned entries older than the aging time; returns how many
    /// (also counted in [`FdbCounters::aged`]). O(entries): call it about
    /// once a second, not per burst.
    pub fn age(&mut self, now: u64) -> usize {
        let aging = self.aging_ms;
        let per_port = &mut self.per_port;
        let before = self.map.len();
        self.map.retain(|_, s| {
            let keep = s.origin == Origin::Static || now.saturating_sub(s.seen()) < aging;
            if !keep {
                if let Some(c) = per_port.get_mut(s.port as usize) {
                    *c = c.saturating_sub(1);
                }
            }
            keep
        });
        let n = before - self.map.len();
        self.counters.aged += n as u64;
        n
    }

    /// Every live entry, sorted by VLAN, then address.
    pub fn entries(&self, now: u64) -> Vec<FdbEntry> {
        let mut v: Vec<FdbEntry> = self
            .map
            .iter()
            .filter(|(_, s)| !self.expired(s, now))
            .map(|(&k, s)| {
                let (vlan, mac) = unkey(k);
                FdbEntry {
                    vlan,
                    mac,
                    port: s.port,
                    origin: s.origin,
                    age_ms: match s.origin {
                        Origin::Static => 0,
                        Origin::Learned => now.saturating_sub(s.seen()),
                    },
                }
            })
            .collect();
        v.sort_by_key(|e| (e.vlan, e.mac));
        v
    }

    /// Learned entries on `port`.
    pub fn learned_on(&self, port: PortId) -> usize {
        self.per_port.get(port as usize).copied().unwrap_or(0)
    }
}

/// The table is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the FDB is full")]
pub struct FdbFull;

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn fdb(max_entries: usize, max_per_port: usize) -> Fdb {
        Fdb::new(FdbConfig {
            aging: Duration::from_secs(10),
            max_entries,
            max_per_port,
        })
    }

    #[test]
    fn keys_round_trip_and_separate_vlans() {
        for (v, m) in [(0u16, A), (4094, B), (1, [0xff; 6])] {
            assert_eq!(unkey(key(v, &m)), (v, m));
        }
        assert_ne!(key(1, &A), key(2, &A));
    }

    #[test]
    fn refresh_keeps_known_sources_and_defers_the_rest() {
        let mut f = fdb(8, 8);
        assert_eq!(
            f.refresh(1, &A, 1, 0),
            Seen::New,
            "a new address needs the write lock"
        );
        f.learn(1, &A, 1, 0);
        let aging = 10_000;
        assert_eq!(
            f.refresh(1, &A, 1, aging - 1),
            Seen::Known,
            "known on this port"
        );
        assert_eq!(f.lookup(1, &A, 2 * aging - 2), Some(1), "refreshed");
        assert_eq!(
            f.refresh(1, &A, 2, aging),
            Seen::New,
            "a move needs the write lock"
        );
        f.add_static(1, &B, 3).unwrap();
        assert_eq!(f.refresh(1, &B, 3, 0), Seen::Known);
        assert_eq!(
            f.refresh(1, &B, 4, 0),
            Seen::StaticElsewhere,
            "a static conflict is counted at once"
        );
        assert_eq!(f.counters().static_conflicts, 1);
        assert_eq!(f.lookup(1, &B, 0), Some(3));
    }

    #[test]
    fn learn_lookup_move_refresh() {
        let mut f = fdb(16, 16);
        assert_eq!(f.lookup(1, &A, 0), None);
        assert_eq!(f.learn(1, &A, 3, 0), Learned::New);
        assert_eq!(f.lookup(1, &A, 5), Some(3));
        assert_eq!(f.lookup(2, &A, 5), None, "VLANs are separate tables");
        assert_eq!(f.learn(1, &A, 3, 1_000), Learned::Refreshed);
        assert_eq!(f.learn(1, &A, 4, 2_000), Learned::Moved { from: 3 });
        assert_eq!(f.lookup(1, &A, 2_000), Some(4));
        assert_eq!((f.learned_on(3), f.learned_on(4)), (0, 1));
        let c = f.counters();
        assert_eq!((c.learned, c.moved), (1, 1));
    }

    #[test]
    fn entries_age_out() {
        let mut f = fdb(16, 16);
        f.learn(1, &A, 1, 0);
        f.learn(1, &B, 1, 5_000);
        assert_eq!(f.lookup(1, &A, 9_999), Some(1));
        // Expired: invisible at once, freed by the sweep.
        assert_eq!(f.lookup(1, &A, 10_000), None);
        assert_eq!(f.entries(10_000).len(), 1);
        assert_eq!(f.age(10_000), 1);
        assert_eq!(f.len(), 1);
        assert_eq!(f.learned_on(1), 1);
        assert_eq!(f.counters().aged, 1);
        // A refreshed entry lives on.
        f.learn(1, &B, 1, 14_000);
        assert_eq!(f.age(20_000), 0);
        assert_eq!(f.lookup(1, &B, 23_999), Some(1));
    }

    #[test]
    fn limits_are_per_port_and_global() {
        let mut f = fdb(4, 2);
        let mac = |i: u8| [2, 0, 0, 0, 1, i];
        assert_eq!(f.learn(1, &mac(1), 1, 0), Learned::New);
        assert_eq!(f.learn(1, &mac(2), 1, 0), Learned::New);
        assert_eq!(f.learn(1, &mac(3), 1, 0), Learned::LimitHit, "port quota");
        assert_eq!(f.learn(1, &mac(3), 2, 0), Learned::New);
        assert_eq!(f.learn(1, &mac(4), 2, 0), Learned::New);
        assert_eq!(f.learn(1, &mac(5), 3, 0), Learned::LimitHit, "table full");
        assert_eq!(f.counters().limit_hits, 2);
        assert_eq!(f.len(), 4);
        // A move needs quota on the new port too.
        assert_eq!(f.learn(1, &mac(1), 2, 0), Learned::LimitHit);
        assert_eq!(f.remove_port(2), 2);
        assert_eq!(f.learn(1, &mac(1), 2, 0), Learned::Moved { from: 1 });
        assert_eq!((f.learned_on(1), f.learned_on(2)), (1, 1));
    }

    #[test]
    fn each_port_has_its_own_quota() {
        let mut f = fdb(64, 8);
        let mac = |p: u8, i: u8| [2, 0, 0, 0, p, i];
        f.set_port_limit(1, 3);
        f.set_port_limit(2, 20);
        // Port 1 sprays: three learned, the rest refused and counted.
        for i in 0..10 {
            let want = if i < 3 {
                Learned::New
            } else {
                Learned::LimitHit
            };
            assert_eq!(f.learn(1, &mac(1, i), 1, 0), want, "address {i}");
        }
        assert!(f.port_full(1));
        assert_eq!((f.learned_on(1), f.counters().limit_hits), (3, 7));
        // The others learn as before: port 2 past the default, port 3 up to
        // the default.
        for i in 0..12 {
            assert_eq!(f.learn(1, &mac(2, i), 2, 0), Learned::New);
        }
        for i in 0..8 {
            assert_eq!(f.learn(1, &mac(3, i), 3, 0), Learned::New);
        }
        assert_eq!(f.learn(1, &mac(3, 8), 3, 0), Learned::LimitHit);
        assert!(!f.port_full(2) && f.port_full(3));
        // A move needs room on the port it moves to.
        assert_eq!(f.learn(1, &mac(2, 0), 1, 0), Learned::LimitHit);
        assert_eq!(f.lookup(1, &mac(2, 0), 0), Some(2));
        // Refusals a PMD found without the write lock count as hits.
        f.count_limit_hits(5);
        assert_eq!(f.counters().limit_hits, 7 + 1 + 1 + 5);
        // A removed port's quota goes with it (the id is reused).
        f.remove_port(1);
        assert_eq!(f.port_limit(1), 8);
        assert_eq!(default_uplink_limit(8192), 4096);
        assert_eq!(default_uplink_limit(1), 1);
        assert_eq!(DEFAULT_MAX_PER_PORT * PORT_SHARES, DEFAULT_MAX_ENTRIES);
    }

    #[test]
    fn static_entries_never_age_or_move() {
        let mut f = fdb(8, 8);
        f.add_static(5, &A, 7).unwrap();
        assert_eq!(f.learn(5, &A, 1, 0), Learned::StaticConflict);
        assert_eq!(f.learn(5, &A, 7, 0), Learned::Refreshed);
        assert_eq!(f.age(u64::MAX / 2), 0);
        assert_eq!(f.lookup(5, &A, u64::MAX / 2), Some(7));
        assert_eq!(f.flush_learned(), 0);
        assert_eq!(f.counters().static_conflicts, 1);
        let e = f.entries(100);
        assert_eq!(e[0].origin, Origin::Static);
        assert!(f.remove_static(5, &A));
        assert!(!f.remove_static(5, &A));
        assert_eq!(f.lookup(5, &A, 0), None);
    }

    #[test]
    fn static_replaces_learned_and_fills_the_table() {
        let mut f = fdb(2, 8);
        f.learn(1, &A, 1, 0);
        f.add_static(1, &A, 2).unwrap();
        assert_eq!(f.learned_on(1), 0);
        f.add_static(1, &B, 2).unwrap();
        assert_eq!(f.add_static(2, &B, 2), Err(FdbFull));
        assert_eq!(f.flush_learned(), 0);
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn flush_keeps_static() {
        let mut f = fdb(8, 8);
        f.learn(1, &A, 1, 0);
        f.add_static(1, &B, 1).unwrap();
        assert_eq!(f.flush_learned(), 1);
        assert_eq!(f.learned_on(1), 0);
        assert_eq!(f.entries(0).len(), 1);
    }
}

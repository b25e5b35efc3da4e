// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The four single-producer/single-consumer rings of an AF_XDP socket, as
//! seen from user space.
//!
//! Each ring is one shared mapping holding a producer index, a consumer
//! index, a flags word and a power-of-two array of descriptors (`u64` UMEM
//! addresses for the fill and completion rings, [`libc::xdp_desc`] for RX
//! and TX):
//!
//! ```text
//!             consumer (cons)                producer (prod)
//!                   v                              v
//!   descs: | free | valid valid valid valid valid | free free ... |
//!          '-- index & mask --'
//!
//!   valid entries:  prod - cons            (u32, wrapping)
//!   free slots:     size - (prod - cons)
//! ```
//!
//! The indices are free-running `u32`s: they only ever increase, wrap at
//! 2^32, and are reduced with `& (size - 1)` when a slot is addressed. All
//! differences are taken with wrapping arithmetic, so `prod - cons` is
//! correct across the wrap as long as it never exceeds `size` (which the
//! protocol guarantees: a producer never has more than `size` entries
//! outstanding).
//!
//! The shared memory itself (the atomics and the descriptor slots, every
//! access bounds-checked) is `crate::sys::xdp::XdpRing`; this file is the
//! bookkeeping over it.
//!
//! User space **produces** on the fill and TX rings ([`ProducerRing`]) and
//! **consumes** from the RX and completion rings ([`ConsumerRing`]); the
//! kernel is the other side of each.
//!
//! # Ordering rules (the same as the kernel's `xsk_queue.h`)
//!
//! * Producer: write descriptors, then publish the new producer index with
//!   a `Release` store, so the consumer that reads the index also sees the
//!   descriptors.
//! * Consumer: read the producer index with an `Acquire` load before reading
//!   any descriptor it covers.
//! * Consumer: after it is done with the descriptors, publish the new
//!   consumer index with a `Release` store, so the producer cannot reuse a
//!   slot that is still being read.
//! * Producer: read the consumer index with an `Acquire` load before
//!   overwriting the slots it frees.
//!
//! Each side keeps a *cached* copy of the other side's index and refreshes
//! it only when the cache says the ring is full (producer) or empty
//! (consumer), so the shared cache line is touched once per burst, not once
//! per descriptor. Publishing is also batched: [`ProducerRing::push`] and
//! [`ConsumerRing::pop`] move only the local index; [`ProducerRing::submit`]
//! and [`ConsumerRing::release`] make a whole burst visible with one store.
//!
//! The flags word carries `XDP_RING_NEED_WAKEUP`. It is a hint the kernel
//! re-evaluates on every pass, read with a `Relaxed` load: a stale read costs
//! at most one needless or one late wake-up, which the next burst repairs.

use std::sync::atomic::Ordering;

use crate::sys::socket::Pod;
use crate::sys::xdp::XdpRing;

/// Free slots of a producer, from its cached `consumer + size` and its own
/// producer index.
#[inline]
pub(super) const fn free_slots(cons_plus_size: u32, prod: u32) -> u32 {
    cons_plus_size.wrapping_sub(prod)
}

/// Valid entries for a consumer between its own index and the producer's.
#[inline]
pub(super) const fn valid_entries(prod: u32, cons: u32) -> u32 {
    prod.wrapping_sub(cons)
}

// ===== impl ProducerRing =====

/// The user-space producer side of a ring (fill, TX).
#[derive(Debug)]
pub(super) struct ProducerRing<T> {
    mem: XdpRing<T>,
    /// Next index to write (ahead of the shared producer index by the
    /// pushed but not yet submitted entries).
    prod: u32,
    /// Cached `consumer + size`: slots up to here are free.
    cons_plus_size: u32,
}

impl<T: Pod> ProducerRing<T> {
    /// Takes the producer role over `mem`.
    pub(super) fn new(mem: XdpRing<T>) -> Self {
        // Relaxed: user space is the only writer of this index.
        let prod = mem.producer().load(Ordering::Relaxed);
        let cons_plus_size = mem
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(mem.size());
        Self {
            mem,
            prod,
            cons_plus_size,
        }
    }

    /// Free slots, refreshing the cached consumer index (`Acquire`) only if
    /// the cache shows fewer than `wanted`.
    pub(super) fn free(&mut self, wanted: u32) -> u32 {
        let free = free_slots(self.cons_plus_size, self.prod);
        if free >= wanted {
            return free;
        }
        self.cons_plus_size = self
            .mem
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.mem.size());
        free_slots(self.cons_plus_size, self.prod)
    }

    /// Writes one entry into the next slot (not yet visible to the kernel:
    /// see [`ProducerRing::submit`]). Returns `false` if the ring is full.
    pub(super) fn push(&mut self, item: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        // Ownership: the slot is free: the consumer index read with Acquire
        // in `free` is past it, so the kernel no longer reads it, and it is
        // not published yet, so the kernel does not read it either.
        self.mem.write(self.prod, item);
        self.prod = self.prod.wrapping_add(1);
        true
    }

    /// Entries pushed but not yet submitted.
    pub(super) fn unsubmitted(&self) -> u32 {
        // Relaxed: only this side writes the producer index.
        valid_entries(self.prod, self.mem.producer().load(Ordering::Relaxed))
    }

    /// Publishes every pushed entry with one `Release` store of the
    /// producer index; returns how many were published.
    pub(super) fn submit(&mut self) -> u32 {
        let n = self.unsubmitted();
        if n > 0 {
            self.mem.producer().store(self.prod, Ordering::Release);
        }
        n
    }

    /// Submitted entries the kernel has not consumed yet (refreshes the
    /// cached consumer index).
    pub(super) fn in_flight(&mut self) -> u32 {
        let published = self.mem.producer().load(Ordering::Relaxed);
        let cons = self.mem.consumer().load(Ordering::Acquire);
        self.cons_plus_size = cons.wrapping_add(self.mem.size());
        valid_entries(published, cons)
    }

    /// Whether the kernel asked to be woken up (`XDP_RING_NEED_WAKEUP`).
    pub(super) fn needs_wakeup(&self) -> bool {
        self.mem.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

// ===== impl ConsumerRing =====

/// The user-space consumer side of a ring (RX, completion).
#[derive(Debug)]
pub(super) struct ConsumerRing<T> {
    mem: XdpRing<T>,
    /// Next index to read (ahead of the shared consumer index by the popped
    /// but not yet released entries).
    cons: u32,
    /// Cached producer index: entries before it are valid.
    prod: u32,
}

impl<T: Pod> ConsumerRing<T> {
    /// Takes the consumer role over `mem`.
    pub(super) fn new(mem: XdpRing<T>) -> Self {
        // Relaxed: user space is the only writer of this index.
        let cons = mem.consumer().load(Ordering::Relaxed);
        let prod = mem.producer().load(Ordering::Acquire);
        Self { mem, cons, prod }
    }

    /// Valid entries not popped yet, refreshing the cached producer index
    /// (`Acquire`) only if the cache shows none.
    pub(super) fn available(&mut self) -> u32 {
        let n = valid_entries(self.prod, self.cons);
        if n > 0 {
            return n;
        }
        self.prod = self.mem.producer().load(Ordering::Acquire);
        let n = valid_entries(self.prod, self.cons);
        debug_assert!(n <= self.mem.size(), "producer ran {n} entries ahead");
        n
    }

    /// Reads the next valid entry; the slot stays reserved until
    /// [`ConsumerRing::release`].
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.available() == 0 {
            return None;
        }
        // Ownership: the entry is valid: the producer index, read with
        // Acquire in `available`, is past it, and the kernel does not
        // overwrite it until the consumer index (published in `release`)
        // passes it.
        let item = self.mem.read(self.cons);
        self.cons = self.cons.wrapping_add(1);
        Some(item)
    }

    /// Returns every popped slot to the kernel with one `Release` store of
    /// the consumer index; returns how many were released.
    pub(super) fn release(&mut self) -> u32 {
        // Relaxed: only this side writes the consumer index.
        let n = valid_entries(self.cons, self.mem.consumer().load(Ordering::Relaxed));
        if n > 0 {
            self.mem.consumer().store(self.cons, Ordering::Release);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sys::mmap::Mmap;
    use std::sync::Arc;

    /// A ring's shared memory without a kernel: the test plays the other
    /// side through a third view of the same memory.
    struct FakeRing<T> {
        map: Arc<Mmap>,
        size: u32,
        kernel: XdpRing<T>,
    }

    const OFFSETS: libc::xdp_ring_offset = libc::xdp_ring_offset {
        producer: 0,
        consumer: 64,
        desc: 192,
        flags: 128,
    };

    impl<T: Pod> FakeRing<T> {
        fn new(size: u32, start: u32) -> Self {
            let map = Arc::new(Mmap::anonymous(4096).unwrap());
            let kernel = XdpRing::new(Arc::clone(&map), size, &OFFSETS).unwrap();
            kernel.producer().store(start, Ordering::Relaxed);
            kernel.consumer().store(start, Ordering::Relaxed);
            Self { map, size, kernel }
        }

        fn mem(&self) -> XdpRing<T> {
            XdpRing::new(Arc::clone(&self.map), self.size, &OFFSETS).unwrap()
        }
    }

    #[test]
    fn ring_must_fit_its_mapping() {
        let map = Arc::new(Mmap::anonymous(4096).unwrap());
        let at = |desc, producer| libc::xdp_ring_offset {
            desc,
            producer,
            ..OFFSETS
        };
        assert!(XdpRing::<u64>::new(Arc::clone(&map), 8, &at(4096 - 64, 0)).is_ok());
        assert!(XdpRing::<u64>::new(Arc::clone(&map), 8, &at(4096 - 63, 0)).is_err());
        assert!(XdpRing::<u64>::new(Arc::clone(&map), 8, &at(4100, 0)).is_err());
        assert!(XdpRing::<u64>::new(Arc::clone(&map), 8, &at(192, 2)).is_err());
        assert!(XdpRing::<u64>::new(Arc::clone(&map), 8, &at(192, 4096)).is_err());
    }

    #[test]
    fn index_arithmetic_wraps() {
        assert_eq!(free_slots(8, 0), 8);
        assert_eq!(free_slots(8, 8), 0);
        // consumer at u32::MAX - 1, size 8: cons + size wrapped to 6.
        let cons = u32::MAX - 1;
        let cps = cons.wrapping_add(8);
        assert_eq!(cps, 6);
        assert_eq!(free_slots(cps, cons), 8);
        assert_eq!(free_slots(cps, cons.wrapping_add(5)), 3);
        assert_eq!(free_slots(cps, 6), 0);
        assert_eq!(valid_entries(2, u32::MAX - 1), 4);
        assert_eq!(valid_entries(5, 5), 0);
    }

    #[test]
    fn produce_then_consume_across_the_wrap() {
        // Start 3 before the u32 wrap so the indices wrap mid-test.
        let fake = FakeRing::<u64>::new(8, u32::MAX - 3);
        let mut prod = ProducerRing::new(fake.mem());
        let mut cons = ConsumerRing::new(fake.mem());
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..50u64 {
            let burst = 1 + round % 8;
            let mut pushed = 0;
            while pushed < burst && prod.push(next_in) {
                next_in += 1;
                pushed += 1;
            }
            assert_eq!(prod.unsubmitted(), u32::try_from(pushed).unwrap());
            // Nothing is visible before submit.
            assert_eq!(cons.available(), 0);
            prod.submit();
            assert_eq!(prod.unsubmitted(), 0);
            while let Some(v) = cons.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            cons.release();
            assert_eq!(prod.in_flight(), 0);
        }
        assert_eq!(next_in, next_out);
        assert!(
            fake.kernel.producer().load(Ordering::Relaxed) < 1000,
            "indices wrapped"
        );
    }

    #[test]
    fn producer_stops_when_full_until_consumer_releases() {
        let fake = FakeRing::<u64>::new(4, u32::MAX - 1);
        let mut prod = ProducerRing::new(fake.mem());
        let mut cons = ConsumerRing::new(fake.mem());
        for i in 0..4 {
            assert!(prod.push(i));
        }
        assert!(!prod.push(99), "ring of 4 holds 4");
        assert_eq!(prod.free(1), 0);
        prod.submit();
        assert_eq!(prod.in_flight(), 4);
        // Popped but not released: the slots stay taken.
        assert_eq!(cons.pop(), Some(0));
        assert_eq!(cons.pop(), Some(1));
        assert_eq!(prod.free(1), 0);
        assert_eq!(cons.release(), 2);
        assert_eq!(prod.free(1), 2);
        assert!(prod.push(4) && prod.push(5));
        assert!(!prod.push(6));
        prod.submit();
        let rest: Vec<u64> = std::iter::from_fn(|| cons.pop()).collect();
        assert_eq!(rest, [2, 3, 4, 5]);
        assert_eq!(cons.release(), 4);
        assert_eq!(prod.free(4), 4);
    }

    #[test]
    fn consumer_sees_nothing_until_producer_publishes() {
        let fake = FakeRing::<libc::xdp_desc>::new(2, 7);
        let mut prod = ProducerRing::new(fake.mem());
        let mut cons = ConsumerRing::new(fake.mem());
        let d = libc::xdp_desc {
            addr: 0x100,
            len: 60,
            options: 0,
        };
        assert!(prod.push(d));
        assert!(cons.pop().is_none());
        assert_eq!(prod.submit(), 1);
        let got = cons.pop().unwrap();
        assert_eq!((got.addr, got.len), (0x100, 60));
        assert_eq!(cons.release(), 1);
        assert_eq!(cons.release(), 0, "nothing new to release");
        assert_eq!(prod.submit(), 0, "nothing new to submit");
    }

    #[test]
    fn need_wakeup_flag() {
        let fake = FakeRing::<u64>::new(2, 0);
        let prod = ProducerRing::new(fake.mem());
        assert!(!prod.needs_wakeup());
        fake.kernel
            .flags()
            .store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(prod.needs_wakeup());
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause

//! `virtio-queue`, rust-vmm's reference implementation of split rings, on a
//! copy of a [`LoopbackGuest`]'s memory: what the differential test and the
//! `ring_differential` fuzz target compare our engine against.

use std::io::Read;

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::net_hdr;
use crate::ring::Layout;
use crate::test_utils::LoopbackGuest;

/// A copy of a loopback guest's memory at the same guest physical
/// addresses, and a `virtio_queue::Queue` on one of its split rings.
#[derive(Debug)]
pub struct Reference {
    /// The copy.
    pub mem: GuestMemoryMmap,
    /// The queue, ready, at the ring's addresses.
    pub queue: Queue,
}

/// What the reference made of one avail entry.
#[derive(Debug)]
pub struct RefChain {
    /// The head it read.
    pub head: u16,
    /// The descriptors its chain iterator yields (it stops silently where
    /// the chain goes wrong).
    pub descs: Vec<Descriptor>,
    /// The bytes its `Reader` reads, when one can be built.
    pub read: Option<Vec<u8>>,
}

impl RefChain {
    /// Whether the chain ended on a descriptor without NEXT.
    pub fn complete(&self) -> bool {
        self.descs.last().is_some_and(|d| !d.has_next())
    }
}

impl Reference {
    /// Copies `g`'s memory as it is now and sets a queue up on its RX
    /// (`rx`) or TX ring.
    ///
    /// # Panics
    /// If the guest's rings are packed, or the copy cannot be made.
    pub fn mirror(g: &LoopbackGuest, rx: bool) -> Self {
        let Layout::Split(l) = g.layout(rx) else {
            panic!("virtio-queue reads split rings only")
        };
        let (base, len) = g.memory_range();
        let mut image = vec![0u8; len as usize];
        g.read_guest(base, &mut image);
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(base), len as usize)])
            .expect("guest memory");
        mem.write_slice(&image, GuestAddress(base)).expect("image");
        let mut queue = Queue::new(l.size).expect("queue");
        queue.set_size(l.size);
        queue.set_desc_table_address(Some(l.desc as u32), Some((l.desc >> 32) as u32));
        queue.set_avail_ring_address(Some(l.avail as u32), Some((l.avail >> 32) as u32));
        queue.set_used_ring_address(Some(l.used as u32), Some((l.used >> 32) as u32));
        queue.set_ready(true);
        Self { mem, queue }
    }

    /// Pops the next avail entry and reads it.
    ///
    /// # Panics
    /// If there is no entry (the caller published one per chain).
    pub fn pop(&mut self) -> RefChain {
        self.pop_with(|_, _| ()).0
    }

    /// [`Reference::pop`], also handing the chain to `f` (for a `Writer`).
    ///
    /// # Panics
    /// If there is no entry.
    pub fn pop_with<R>(
        &mut self,
        f: impl FnOnce(DescriptorChain<&GuestMemoryMmap>, &GuestMemoryMmap) -> R,
    ) -> (RefChain, R) {
        let chain = self
            .queue
            .pop_descriptor_chain(&self.mem)
            .expect("one chain per avail entry");
        let head = chain.head_index();
        let descs = chain.clone().collect();
        let read = chain.clone().reader(&self.mem).ok().map(|mut r| {
            let mut v = Vec::new();
            r.read_to_end(&mut v).expect("reader reads");
            v
        });
        let r = f(chain, &self.mem);
        (RefChain { head, descs, read }, r)
    }

    /// Steps back over the last entry popped (it stays for the next pop).
    pub fn unpop(&mut self) {
        use virtio_queue::QueueOwnedT;
        self.queue.go_to_previous_position();
    }

    /// Returns `head` with `len` bytes written; false when refused.
    pub fn add_used(&mut self, head: u16, len: u32) -> bool {
        self.queue.add_used(&self.mem, head, len).is_ok()
    }

    /// Reads `out.len()` bytes of the copy at `gpa`.
    ///
    /// # Panics
    /// Outside the copy.
    pub fn read(&self, gpa: u64, out: &mut [u8]) {
        self.mem
            .read_slice(out, GuestAddress(gpa))
            .expect("inside the copy");
    }
}

/// A TX chain's bytes as our engine hands them out: the virtio-net header
/// keeps only `NEEDS_CSUM` of its flags and loses `num_buffers` (a guest
/// must not set `DATA_VALID` or `RSC_INFO` on TX, nor make another guest
/// skip checksum validation).
pub fn sanitized_tx(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    if v.len() >= 12 {
        v[0] &= net_hdr::F_NEEDS_CSUM;
        v[10..12].fill(0);
    }
    v
}

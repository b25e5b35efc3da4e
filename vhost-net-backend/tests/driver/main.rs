// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end tests of the backend, in process: a [`Port`] served by an echo thread, and the
//! in-process virtio-net driver ([`TestDriver`]) as the guest, over a real Unix socket and
//! memfd guest memory. No root is needed.
//!
//! # The harness
//!
//! [`Echo`] starts a port (each test on its own socket, in its own temporary directory) and
//! one data-plane thread that serves every queue pair of it: each frame the guest transmits on
//! a pair is copied back into the receive queue of the same pair, with the two MAC addresses
//! swapped (through [`vhost_net_backend::TxFrame::head_mut`], so what lands in the guest is
//! the private head copy) and its `virtio_net_hdr` passed through unchanged. The thread sleeps
//! on a [`Poller`] whenever it finds no work (interrupt mode: the machine has two cores and
//! the tests run in parallel). It applies no back-pressure: a frame that finds no receive
//! buffer is dropped and counted (`NoBuffers`), so tests post receive buffers before they
//! transmit. [`Echo::stop`] stops the thread, checks that the port's counters and the queues'
//! counters agree, and returns the counters of each pair.
//!
//! The echo thread also watches the notification protocol: a wake-up by timeout (rather than
//! by a kick) that then finds frames to move is a kick that was lost, by the driver or by the
//! backend; [`Echo::stop`] asserts there were none.
//!
//! # What every test checks
//!
//! Frames come back byte-exact (modulo the MAC swap) with the header they were sent with;
//! frames in equal frames out; the backend's TX and RX packet and byte counters equal what
//! the driver sent and received; drops are zero unless the test provokes them, and then they
//! are counted under the expected [`DropReason`]; and the driver saw no spec violation from
//! the backend ([`TestDriver::violations`]).
//!
//! # Where the tests are
//!
//! | module | what it covers |
//! |---|---|
//! | [`harness`] | the echo port, test frames, round trips and the shared checks |
//! | [`sizes`] | frame sizes, features, buffer layouts, ring sizes, interrupt suppression |
//! | [`lifecycle`] | disconnect and reconnect, client role, stop and resume |
//! | [`hostile`] | malformed rings and descriptors from a hostile guest |
//! | [`protocol`] | refused features, garbage on the socket, queue counts, memory slots |
//! | [`offloads`] | offload headers, unacked offloads, packed rings offered |
//!
//! [`Port`]: vhost_net_backend::Port
//! [`Poller`]: vhost_net_backend::Poller
//! [`DropReason`]: vhost_net_backend::DropReason
//! [`TestDriver`]: vhost_net_backend::test_utils::TestDriver
//! [`TestDriver::violations`]: vhost_net_backend::test_utils::TestDriver::violations
//! [`Echo`]: harness::Echo
//! [`Echo::stop`]: harness::Echo::stop

mod harness;
mod hostile;
mod lifecycle;
mod offloads;
mod protocol;
mod sizes;

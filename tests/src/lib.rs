// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Support code for vhu's end-to-end tests against real peers.
//!
//! The tests in `tests/tests/` are `#[ignore]`d so that a plain `cargo test`
//! on a developer machine without root or peers reports them as ignored; the
//! project's test command (`scripts/test.sh`) installs every peer and runs them
//! with `--include-ignored`. A missing peer is a test failure, never a skip.

pub mod echo;
pub mod netns;
pub mod peers;
pub mod qemu;
pub mod testpmd;
pub mod wire;

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Support code for vhu's end-to-end tests against real peers.
//!
//! The tests in `tests/tests/` are `#[ignore]`d so that a plain `cargo test`
//! on a developer machine without root or peers reports them as ignored; the
//! project's test command (`scripts/test.sh`) installs every peer and runs them
//! with `--include-ignored`. A missing peer is a test failure, never a skip.
//!
//! `unsafe` lives in [`process`] only: the `libc` calls around child
//! processes, signals and namespaces.

#![deny(unsafe_code)]

pub mod bins;
pub mod cni_node;
pub mod cri;
pub mod device_plugin;
pub mod driver;
pub mod echo;
pub mod features;
pub mod footprint;
pub mod libvirt;
pub mod netns;
pub mod peers;
pub mod pod;
#[allow(unsafe_code)]
pub mod process;
pub mod qemu;
pub mod stream;
pub mod switch;
pub mod testpmd;
pub mod uplink;
pub mod wire;

/// Defines `#[test]`s `#[ignore]`d with `$reason` (the end-to-end tests run
/// with `--include-ignored`), one per `name => call;` line: tests that run
/// one shared body with their own arguments, e.g. once per uplink kind.
///
/// ```text
/// vhu_tests::ignored_tests! {
///     "needs root: run scripts/test.sh";
///     rx_from_peer_native => rx_from_peer(Attach::Native);
///     rx_from_peer_generic => rx_from_peer(Attach::Generic);
/// }
/// ```
#[macro_export]
macro_rules! ignored_tests {
    ($reason:literal; $($name:ident => $call:expr;)*) => {$(
        #[test]
        #[ignore = $reason]
        fn $name() {
            $call;
        }
    )*};
}

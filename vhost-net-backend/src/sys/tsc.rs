// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The CPU's time-stamp counter, for busy/idle cycle accounting of
//! data-plane threads: read once per burst, never per frame.

/// The time-stamp counter (`rdtsc`) on x86-64; elsewhere nanoseconds of a
/// monotonic clock, so that the accounting stays meaningful (in other
/// units).
#[inline]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        let e = EPOCH.get_or_init(Instant::now);
        u64::try_from(e.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn advances() {
        let a = super::tsc();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::tsc() > a);
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Network interfaces: the one rule for interface names, `if_nametoindex`,
//! and the `SIOC*IF*` ioctls (MTU, `IFF_UP`) on a throw-away socket.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::{check, socket};

/// What a valid interface name is, for error messages.
pub(crate) const IFNAME_RULE: &str = "1 to 15 bytes, no NUL";

/// An interface name the kernel can take: 1 to `IFNAMSIZ - 1` bytes, no
/// NUL (or empty, where the kernel picks the name).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct IfName(CString);

/// A name that breaks [`IFNAME_RULE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvalidIfName(pub(crate) String);

impl fmt::Display for InvalidIfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid interface name {:?} ({IFNAME_RULE})", self.0)
    }
}

impl std::error::Error for InvalidIfName {}

impl IfName {
    /// Checks `name` against [`IFNAME_RULE`].
    ///
    /// # Errors
    /// The name is empty, longer than 15 bytes or contains NUL.
    pub(crate) fn new(name: &str) -> Result<Self, InvalidIfName> {
        if name.is_empty() {
            return Err(InvalidIfName(name.to_owned()));
        }
        Self::new_or_empty(name)
    }

    /// As [`IfName::new`], but the empty name (the kernel picks one, as
    /// `TUNSETIFF` does) is allowed.
    ///
    /// # Errors
    /// The name is longer than 15 bytes or contains NUL.
    pub(crate) fn new_or_empty(name: &str) -> Result<Self, InvalidIfName> {
        if name.len() >= libc::IFNAMSIZ {
            return Err(InvalidIfName(name.to_owned()));
        }
        CString::new(name)
            .map(Self)
            .map_err(|_| InvalidIfName(name.to_owned()))
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        // Invariant: built from a `&str`.
        self.0.to_str().unwrap_or_default()
    }

    /// An `ifreq` naming this interface, the rest zeroed.
    pub(super) fn ifreq(&self) -> libc::ifreq {
        // SAFETY: an all-zero ifreq is valid (empty name, zero union).
        let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in r.ifr_name.iter_mut().zip(self.0.as_bytes()) {
            *d = *s as libc::c_char;
        }
        r
    }

    /// Reads the name the kernel wrote back into `r` (`TUNSETIFF`).
    pub(super) fn from_ifreq(r: &libc::ifreq) -> String {
        let bytes: Vec<u8> = r
            .ifr_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl fmt::Debug for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `ioctl(fd, req, &mut ifreq)`.
pub(super) fn ioctl_ifreq(
    fd: &impl AsRawFd,
    req: libc::Ioctl,
    r: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: `r` is a valid, writable ifreq for the call, which is what
    // every request passed here (TUNSETIFF, SIOCGIFMTU, SIOC[GS]IFFLAGS)
    // reads or writes.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req, std::ptr::from_mut(r)) }).map(drop)
}

/// A datagram socket for interface ioctls (AF_XDP and TAP fds do not
/// implement them).
fn control_socket() -> io::Result<OwnedFd> {
    socket::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
}

/// The index of interface `name` (in the calling thread's network
/// namespace).
pub(crate) fn ifindex(name: &IfName) -> io::Result<u32> {
    // SAFETY: `name` is a valid NUL-terminated string for the call.
    let idx = unsafe { libc::if_nametoindex(name.0.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// The MTU of interface `name` (`SIOCGIFMTU`).
pub(crate) fn mtu(name: &IfName) -> io::Result<u32> {
    let sock = control_socket()?;
    let mut ifr = name.ifreq();
    ioctl_ifreq(&sock, libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: SIOCGIFMTU wrote `ifru_mtu`, an int.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// A failed step of a multi-call operation, named as the caller reports it.
#[derive(Debug)]
pub(crate) struct Failed {
    /// The call (`socket`, `SIOCGIFFLAGS`, ...).
    pub(crate) step: &'static str,
    /// Its error.
    pub(crate) source: io::Error,
}

/// Sets the link up: `SIOCGIFFLAGS`, then `SIOCSIFFLAGS` with `IFF_UP`.
pub(crate) fn set_up(name: &IfName) -> Result<(), Failed> {
    let at = |step| move |source| Failed { step, source };
    let sock = control_socket().map_err(at("socket"))?;
    let mut req = name.ifreq();
    ioctl_ifreq(&sock, libc::SIOCGIFFLAGS, &mut req).map_err(at("SIOCGIFFLAGS"))?;
    // SAFETY: SIOCGIFFLAGS filled ifru_flags.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    ioctl_ifreq(&sock, libc::SIOCSIFFLAGS, &mut req).map_err(at("SIOCSIFFLAGS"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_names() {
        assert!(IfName::new("").is_err());
        assert!(IfName::new_or_empty("").is_ok());
        assert!(IfName::new("a-name-that-is-too-long").is_err());
        assert!(IfName::new("nul\0name").is_err());
        assert_eq!(IfName::new("eth0").unwrap().as_str(), "eth0");
        assert!(IfName::new("fifteen-bytes-x").is_ok());
        assert_eq!(
            InvalidIfName("x\0".into()).to_string(),
            "invalid interface name \"x\\0\" (1 to 15 bytes, no NUL)"
        );
        let r = IfName::new("lo").unwrap().ifreq();
        assert_eq!(IfName::from_ifreq(&r), "lo");
        assert!(ifindex(&IfName::new("vhu-no-such-if").unwrap()).is_err());
    }
}

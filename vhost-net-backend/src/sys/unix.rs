// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Unix stream sockets at paths of any length.
//!
//! `sockaddr_un.sun_path` holds 108 bytes, terminating NUL included, and
//! Kubernetes pod volume paths routinely exceed that
//! (`/var/lib/kubelet/pods/<uid>/volumes/...`). DPDK, OVS and VPP refuse
//! such paths. Here a longer path is reached through its directory: the
//! directory is opened (`O_PATH`), and the socket is bound or connected as
//! `/proc/self/fd/<fd>/<name>`, which the kernel resolves through the open
//! directory. Only the file name must then fit, which it does unless it is
//! itself some 90 bytes long.
//!
//! Also the credentials of a connected peer (`SO_PEERCRED`), for sockets
//! that serve only some users.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Longest path `sun_path` holds (108 bytes with the terminating NUL).
pub const SUN_PATH_MAX: usize = 107;

/// A path that fits `sun_path`, with the directory kept open for as long as
/// the short path is used.
struct Short {
    path: PathBuf,
    _dir: Option<File>,
}

fn short(path: &Path) -> io::Result<Short> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return Ok(Short {
            path: path.to_owned(),
            _dir: None,
        });
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a socket path", path.display()),
        ));
    };
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?;
    let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    if via.as_os_str().len() > SUN_PATH_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: the socket's file name is too long ({} bytes; sockets in long \
                 directories need names under 90 bytes)",
                path.display(),
                name.len()
            ),
        ));
    }
    Ok(Short {
        path: via,
        _dir: Some(dir),
    })
}

/// Connects to the socket at `path`, whatever its length.
///
/// # Errors
/// As `connect(2)`, or opening the directory of a long path.
pub fn connect(path: &Path) -> io::Result<UnixStream> {
    let s = short(path)?;
    UnixStream::connect(&s.path)
}

/// Binds a listening socket at `path`, whatever its length.
///
/// # Errors
/// As `bind(2)`/`listen(2)`, or opening the directory of a long path.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let s = short(path)?;
    UnixListener::bind(&s.path)
}

/// Who is at the other end of a Unix socket, as the kernel recorded it at
/// `connect(2)` (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's process id (0 when it is in a PID namespace the kernel
    /// cannot map into ours).
    pub pid: i32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
}

/// The credentials of the peer of `s`.
///
/// # Errors
/// As `getsockopt(2)`.
pub fn peer_cred(s: &UnixStream) -> io::Result<PeerCred> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` is a writable `ucred` and `len` its size; the kernel
    // writes at most `len` bytes there and the new length into `len`. The
    // fd is owned by `s`, alive for the call.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut c).cast(),
            &raw mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
    })
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: `geteuid` takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn peer_cred_is_this_process() {
        let (a, b) = UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid, std::process::id() as i32);
        assert_eq!(c.uid, effective_uid());
        assert_eq!(peer_cred(&b).unwrap(), c);
    }

    #[test]
    fn long_paths_bind_and_connect() {
        let base = std::env::temp_dir().join(format!("vhu-unix-{}", std::process::id()));
        let mut dir = base.clone();
        while dir.as_os_str().len() < 200 {
            dir.push("d".repeat(40));
        }
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vm1.sock");
        assert!(path.as_os_str().len() > SUN_PATH_MAX);
        assert!(UnixListener::bind(&path).is_err(), "std alone cannot");
        let l = bind(&path).unwrap();
        assert!(path.exists(), "the socket is at the long path itself");
        let mut c = connect(&path).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        let long_name = dir.join("n".repeat(100));
        let e = bind(&long_name).unwrap_err();
        assert!(e.to_string().contains("file name is too long"), "{e}");
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn short_paths_are_used_as_they_are() {
        let p = std::env::temp_dir().join(format!("vhu-unix-s-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let _l = bind(&p).unwrap();
        connect(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
    }
}

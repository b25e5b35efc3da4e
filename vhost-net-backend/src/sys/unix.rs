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
//!
//! **In a directory a tenant may write** (a pod's socket directory), a
//! socket is bound and connected without following a link the tenant put
//! there ([`bind_at`], [`connect_checked`], [`BoundSocket::remove`]; the
//! walk is [`super::dirfd`]'s):
//!
//! * *bind*: the socket is bound in a fresh directory only the switch can
//!   enter (`mkdirat(".vhu-bind-<pid>-<n>", 0700)` in the target
//!   directory), given its mode (`fchmodat`) and owner (`fchownat`, not
//!   followed) there, and renamed into place (`renameat2(RENAME_NOREPLACE)`)
//!   between the two held directory descriptors. No one else sees the
//!   socket before it has its final owner and mode, and no name the tenant
//!   controls is resolved by `chmod`/`chown`. (A `umask` would be
//!   process-wide, and `fchmod` on a socket's descriptor changes the
//!   socket, not its file.) A stale socket in the way (nobody answers) is
//!   removed with `unlinkat` in the held directory: the entry itself, never
//!   what a link points to; anything else in the way is refused.
//! * *connect* (client role, the VMM made the socket): the entry is opened
//!   `O_PATH | O_NOFOLLOW` and checked on the descriptor: a link or a
//!   non-socket is refused, and so is a socket whose owner is neither root,
//!   nor this process's user, nor the owner of the directory holding it (a
//!   VMM in a pod owns its socket and its directory; a socket of another
//!   tenant's, linked in, has another owner). The connection goes to
//!   `/proc/self/fd/<that descriptor>`: the object checked is the object
//!   connected to, whatever the name points to by then.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::dirfd::{self, Dir, Entry};

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

/// How [`bind_at`] makes a server socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BindOptions {
    /// The socket's mode (`None`: as the umask leaves it).
    pub mode: Option<u32>,
    /// Its owner (`None`: this process's user).
    pub owner: Option<u32>,
    /// Its group (`None`: this process's group).
    pub group: Option<u32>,
    /// Create the missing directories on the way, with this mode (`None`:
    /// the directory must exist).
    pub create_dirs: Option<u32>,
}

/// A server socket [`bind_at`] made: its directory, held open, and the
/// file it bound, to remove it ([`BoundSocket::remove`]) only while it is
/// still that file.
#[derive(Debug)]
pub struct BoundSocket {
    dir: Dir,
    name: OsString,
    file: Entry,
    /// The socket file, held (`O_PATH`) so that its inode number is not
    /// reused by another file while we compare against it.
    _held: OwnedFd,
}

impl BoundSocket {
    /// Removes the socket file, relative to the held directory, if the
    /// entry there is still the socket bound (a tenant may have replaced
    /// it: its replacement is left alone). Returns whether it was removed.
    ///
    /// # Errors
    /// As `fstatat(2)`/`unlinkat(2)`.
    pub fn remove(&self) -> io::Result<bool> {
        match self.dir.stat(&self.name)? {
            Some(e) if e.same_file(&self.file) => self.dir.unlink(&self.name).map(|()| true),
            _ => Ok(false),
        }
    }

    /// The socket's owner, group and mode as bound.
    pub fn file(&self) -> Entry {
        self.file
    }
}

/// `path` made absolute (against the working directory), split into its
/// directory and file name.
fn split(path: &Path) -> io::Result<(PathBuf, OsString)> {
    let abs = std::path::absolute(path)?;
    match (abs.parent(), abs.file_name()) {
        (Some(d), Some(n)) => Ok((d.to_owned(), n.to_owned())),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a socket path", path.display()),
        )),
    }
}

fn context(path: &Path, e: io::Error) -> io::Error {
    if e.to_string().contains(&*path.to_string_lossy()) {
        e
    } else {
        io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    }
}

/// Binds a listening socket at `path` (absolute, any length) without
/// following a link a tenant could have put on the way, with its mode and
/// owner set before it appears (the module documentation). A stale socket
/// in its place is replaced.
///
/// # Errors
/// `AddrInUse` when a process answers on the socket in place;
/// `AlreadyExists` when something that is not a socket is there;
/// `PermissionDenied` for a link in a directory a tenant may write
/// ([`dirfd::trusted`]); or the failing call's error.
pub fn bind_at(path: &Path, opts: &BindOptions) -> io::Result<(UnixListener, BoundSocket)> {
    let (dir, name) = split(path)?;
    let name = name.as_os_str();
    let dir = Dir::open(&dir, opts.create_dirs)?;
    if let Some(e) = dir.stat(name)? {
        if !e.is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        let fd = dir.open_entry(name)?;
        if UnixStream::connect(proc_fd(&fd)).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is served by another process", path.display()),
            ));
        }
        tracing::info!("removing stale socket {}", path.display());
        match dir.unlink(name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(context(path, e)),
        }
    }
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let tmp = OsString::from(format!(
        ".vhu-bind-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    dir.mkdir(&tmp, 0o700).map_err(|e| context(path, e))?;
    let r = bind_private(&dir, &tmp, name, opts);
    // Empty once the socket was renamed away (or never bound); a
    // replacement by the directory's owner is theirs.
    let _ = dir.rmdir(&tmp);
    let (l, file, held) = r.map_err(|e| context(path, e))?;
    Ok((
        l,
        BoundSocket {
            dir,
            name: name.to_owned(),
            file,
            _held: held,
        },
    ))
}

const PRIVATE: &str = "s";

/// Binds in `dir/tmp` (made 0700 by the caller), sets mode and owner,
/// renames into `dir/name`.
fn bind_private(
    dir: &Dir,
    tmp: &OsStr,
    name: &OsStr,
    opts: &BindOptions,
) -> io::Result<(UnixListener, Entry, OwnedFd)> {
    let private = dir.subdir(tmp)?;
    let me = effective_uid();
    if private.entry().uid != me || private.entry().mode & 0o077 != 0 {
        // Not the directory just made: its name was taken over.
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: the private directory was replaced",
                private.path().display()
            ),
        ));
    }
    let s = OsStr::new(PRIVATE);
    let l = UnixListener::bind(private.proc_path(s))?;
    let set = (|| {
        if let Some(m) = opts.mode {
            private.chmod_private(s, m)?;
        }
        if opts.owner.is_some() || opts.group.is_some() {
            private.chown(s, opts.owner, opts.group)?;
        }
        let held = private.open_entry(s)?;
        let file = dirfd::stat_fd(&held)?;
        private.rename(s, dir, name, true).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another file took the socket's name meanwhile",
                )
            } else {
                e
            }
        })?;
        Ok((file, held))
    })();
    match set {
        Ok((file, held)) => Ok((l, file, held)),
        Err(e) => {
            let _ = private.unlink(s);
            Err(e)
        }
    }
}

fn proc_fd(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Opens (`O_PATH`) the socket a client-role port connects to, checked:
/// not a link, a socket, owned by root, this process's user or the owner
/// of its directory (the module documentation).
///
/// # Errors
/// `NotFound` when it (or its directory) does not exist yet;
/// `PermissionDenied` for a link, a foreign owner, or a link on the way in
/// a directory a tenant may write; `InvalidInput` for a non-socket.
pub fn open_client_socket(path: &Path) -> io::Result<OwnedFd> {
    let (dir, name) = split(path)?;
    let dir = Dir::open(&dir, None)?;
    let fd = dir.open_entry(&name).map_err(|e| context(path, e))?;
    let e = dirfd::stat_fd(&fd)?;
    if e.is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is a symbolic link: not followed", path.display()),
        ));
    }
    if !e.is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a socket", path.display()),
        ));
    }
    let me = effective_uid();
    let owner = dir.entry().uid;
    if e.uid != 0 && e.uid != me && e.uid != owner {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {}: neither root, nor this switch's uid {me}, nor its \
                 directory's owner uid {owner}",
                path.display(),
                e.uid
            ),
        ));
    }
    Ok(fd)
}

/// Connects to the client-role socket at `path`, checked by
/// [`open_client_socket`], through its descriptor.
///
/// # Errors
/// As [`open_client_socket`], or `connect(2)`.
pub fn connect_checked(path: &Path) -> io::Result<UnixStream> {
    let fd = open_client_socket(path)?;
    UnixStream::connect(proc_fd(&fd))
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

    #[test]
    fn bind_at_sets_mode_before_the_socket_appears_and_removes_only_its_own() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = std::env::temp_dir().join(format!("vhu-unix-at-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut dir = base.join("made");
        while dir.as_os_str().len() < 200 {
            dir.push("d".repeat(40));
        }
        let path = dir.join("vm1.sock");
        let opts = BindOptions {
            mode: Some(0o640),
            create_dirs: Some(0o755),
            ..BindOptions::default()
        };
        let (l, b) = bind_at(&path, &opts).unwrap();
        let md = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no private dir left"
        );
        let e = bind_at(&path, &opts).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        let c = connect_checked(&path).unwrap();
        let _ = l.accept().unwrap();
        drop(c);
        // Stale: replaced.
        drop(l);
        let (_l2, b2) = bind_at(&path, &opts).unwrap();
        assert!(!b.remove().unwrap(), "not the socket it bound any more");
        assert!(path.exists());
        assert!(b2.remove().unwrap());
        assert!(!path.exists());
        // A file in the way is refused; a link to a socket is not connected.
        std::fs::write(&path, b"keep").unwrap();
        let e = bind_at(&path, &opts).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
        let (_l3, _b3) = bind_at(&base.join("real.sock"), &opts).unwrap();
        std::os::unix::fs::symlink(base.join("real.sock"), base.join("link.sock")).unwrap();
        let e = connect_checked(&base.join("link.sock")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let e = connect_checked(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        std::fs::remove_dir_all(base).unwrap();
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Paths walked by directory file descriptors, for places a tenant may
//! write.
//!
//! A pod owns every directory mounted into it (its `emptyDir`, the socket
//! directories a CNI gives it) and may put symbolic links there. A path
//! handed to `mkdir`, `chown`, `chmod`, `unlink`, `bind` or `connect`
//! by name is resolved again by the kernel at each call, and a link put in
//! between turns the call into one on a file elsewhere, done with the
//! switch's privileges. Here a path is resolved once, one component at a
//! time, into an open directory ([`Dir`]), and every later operation is
//! relative to that descriptor (`mkdirat`, `fchownat`, `unlinkat`,
//! `renameat2`, `fstatat`), on a final component that is never followed
//! (`AT_SYMLINK_NOFOLLOW`, `O_NOFOLLOW`).
//!
//! **Which links are followed.** A symbolic link is followed only when the
//! directory that holds it is *trusted*: owned by root or by this process's
//! user, and writable by neither its group nor others. So `/var/run ->
//! /run` (root's, in root's `0755` `/var`) is followed, and a link in a
//! pod's directory (owned by the pod's user, or group- or world-writable,
//! `/tmp` included) is refused with `PermissionDenied`, naming the link and
//! the directory's owner and mode. Each component is opened with
//! `O_PATH | O_DIRECTORY | O_NOFOLLOW`: a link swapped in after it was
//! looked at fails the open (`ENOTDIR`) instead of being followed.
//! (`openat2(RESOLVE_NO_SYMLINKS)` would refuse every link, `/var/run`
//! too, and the per-component walk is needed for the trust decision
//! anyway: one code path on every kernel.)

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use super::check;

/// Most symbolic links one walk follows (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// What `fstatat` says of a directory entry (or of an open descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The file type bits (`S_IFMT` of `st_mode`).
    pub kind: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// The owner.
    pub uid: u32,
    /// The group.
    pub gid: u32,
    /// The device.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
}

impl Entry {
    fn from_stat(st: &libc::stat) -> Entry {
        Entry {
            kind: st.st_mode & libc::S_IFMT,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }

    /// A socket.
    pub fn is_socket(&self) -> bool {
        self.kind == libc::S_IFSOCK
    }

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.kind == libc::S_IFLNK
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }

    /// The same file as `other` (device and inode).
    pub fn same_file(&self, other: &Entry) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// Whether a link in a directory like `dir` may be followed: only root or
/// this process's user can have put it there.
pub fn trusted(dir: &Entry) -> bool {
    (dir.uid == 0 || dir.uid == super::unix::effective_uid()) && dir.mode & 0o022 == 0
}

/// An open directory (`O_PATH`), reached without following a link a
/// tenant could have put on the way.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    st: Entry,
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?}: a NUL byte in a file name"),
        )
    })
}

/// A single file name: not empty, no `/`, not `.` or `..`.
fn plain_name(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b.contains(&b'/') || b == b"." || b == b".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    cstr(name)
}

/// # Safety
///
/// `dir` is an open descriptor (or `AT_FDCWD`), `name` a NUL-terminated
/// string alive for the call.
unsafe fn openat_raw(
    dir: RawFd,
    name: &CString,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: per the contract, `dir` is open and `name` NUL-terminated;
    // `open` reads the string only.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: `openat` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name)`; an empty `name` with `AT_EMPTY_PATH` is the
/// descriptor itself.
fn stat_at(dir: RawFd, name: &CString, flags: libc::c_int) -> io::Result<Entry> {
    // SAFETY: an all-zero `stat` is a valid value of a plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor owned by the caller, `name` is
    // NUL-terminated, and `st` is a writable `stat` the kernel fills.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &raw mut st, flags) })?;
    Ok(Entry::from_stat(&st))
}

/// What an open descriptor is (`fstat`).
///
/// # Errors
/// As `fstat(2)`.
pub fn stat_fd(fd: &impl AsRawFd) -> io::Result<Entry> {
    stat_at(fd.as_raw_fd(), &CString::default(), libc::AT_EMPTY_PATH)
}

fn denied(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

impl Dir {
    /// The root directory.
    fn root() -> io::Result<Dir> {
        let slash = CString::new("/").expect("no NUL");
        // SAFETY: AT_FDCWD with an absolute NUL-terminated path.
        let fd =
            unsafe { openat_raw(libc::AT_FDCWD, &slash, libc::O_PATH | libc::O_DIRECTORY, 0) }?;
        let st = stat_fd(&fd)?;
        Ok(Dir {
            fd,
            path: PathBuf::from("/"),
            st,
        })
    }

    /// Opens the directory `path` (absolute), following only links in
    /// [`trusted`] directories (see the module documentation). With
    /// `create`, a missing component is created (`mkdirat`, with that
    /// mode, owned by this process) and entered without a second lookup by
    /// name being trusted: it is opened `O_NOFOLLOW | O_DIRECTORY`.
    ///
    /// # Errors
    /// `PermissionDenied` for a link in an untrusted directory (naming it),
    /// `NotADirectory` for a component that is a file, `NotFound` for a
    /// missing component without `create`, or the failing call's error.
    pub fn open(path: &Path, create: Option<u32>) -> io::Result<Dir> {
        if !path.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not an absolute path", path.display()),
            ));
        }
        let mut stack = vec![Dir::root()?];
        let mut rest: Vec<OsString> = Vec::new();
        push_components(&mut rest, path);
        let mut links = 0;
        while let Some(c) = rest.pop() {
            if c == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            let cur = stack.last().expect("the root is never popped");
            let name = cstr(&c)?;
            let here = cur.path.join(&c);
            let e = match stat_at(cur.fd.as_raw_fd(), &name, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(e) => e,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    let Some(mode) = create else {
                        return Err(io::Error::new(
                            err.kind(),
                            format!("{}: no such directory", here.display()),
                        ));
                    };
                    match cur.mkdir(&c, mode) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => {
                            return Err(io::Error::new(
                                e.kind(),
                                format!("cannot create {}: {e}", here.display()),
                            ))
                        }
                    }
                    rest.push(c);
                    continue;
                }
                Err(err) => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!("{}: {err}", here.display()),
                    ))
                }
            };
            if e.is_symlink() {
                if !trusted(&cur.st) {
                    return Err(denied(format!(
                        "{} is a symbolic link in {}, a directory uid {} owns with mode {:04o}: \
                         links there are not followed",
                        here.display(),
                        cur.path.display(),
                        cur.st.uid,
                        cur.st.mode
                    )));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{}: too many levels of symbolic links", path.display()),
                    ));
                }
                let target = read_link_at(cur.fd.as_raw_fd(), &name)?;
                if target.is_absolute() {
                    stack.truncate(1);
                }
                push_components(&mut rest, &target);
                continue;
            }
            if !e.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", here.display()),
                ));
            }
            let next = cur.subdir(&c)?;
            stack.push(next);
        }
        Ok(stack.pop().expect("the root is never popped"))
    }

    /// The directory as it was reached (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's owner, mode, inode (as opened).
    pub fn entry(&self) -> Entry {
        self.st
    }

    /// The open descriptor (`O_PATH`).
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `/proc/self/fd/<fd>/<name>`: `name` in this directory, for calls
    /// that take only a path (`bind`, `connect`), resolved by the kernel
    /// through the open directory.
    pub fn proc_path(&self, name: &OsStr) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).join(name)
    }

    /// The entry `name`, not followed (`fstatat(AT_SYMLINK_NOFOLLOW)`);
    /// `None` when there is none.
    ///
    /// # Errors
    /// As `fstatat(2)`, but for `ENOENT`.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Entry>> {
        match stat_at(
            self.as_raw_fd(),
            &plain_name(name)?,
            libc::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The subdirectory `name`, never a link (`O_NOFOLLOW | O_DIRECTORY`).
    ///
    /// # Errors
    /// As `openat(2)`: `ENOTDIR` (or `ELOOP`) for a link or a file.
    pub fn subdir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = plain_name(name)?;
        let path = self.path.join(name);
        // SAFETY: our open descriptor and a NUL-terminated name.
        let fd = unsafe {
            openat_raw(
                self.as_raw_fd(),
                &c,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
        }
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let st = stat_fd(&fd)?;
        Ok(Dir { fd, path, st })
    }

    /// `name` opened `O_PATH | O_NOFOLLOW`: the entry itself (a link is
    /// opened as the link), to check with [`stat_fd`] and then use by
    /// `/proc/self/fd/<fd>` (the checked object, whatever the name
    /// points to by then).
    ///
    /// # Errors
    /// As `openat(2)`.
    pub fn open_entry(&self, name: &OsStr) -> io::Result<OwnedFd> {
        let c = plain_name(name)?;
        // SAFETY: our open descriptor and a NUL-terminated name.
        unsafe { openat_raw(self.as_raw_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW, 0) }
    }

    /// Opens (creates or truncates) the regular file `name` for writing,
    /// never through a link (`O_NOFOLLOW`), with `mode` for a new file.
    ///
    /// # Errors
    /// As `openat(2)`: `ELOOP` for a link.
    pub fn create_file(&self, name: &OsStr, mode: u32) -> io::Result<std::fs::File> {
        let c = plain_name(name)?;
        // SAFETY: our open descriptor and a NUL-terminated name.
        let fd = unsafe {
            openat_raw(
                self.as_raw_fd(),
                &c,
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW,
                mode,
            )
        }?;
        Ok(std::fs::File::from(fd))
    }

    /// `mkdirat(name, mode)` (the umask applies).
    ///
    /// # Errors
    /// As `mkdirat(2)`.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = plain_name(name)?;
        // SAFETY: our open descriptor and a NUL-terminated name.
        check(unsafe { libc::mkdirat(self.as_raw_fd(), c.as_ptr(), mode) }).map(drop)
    }

    /// `unlinkat(name)`: removes the entry itself, never what it points to.
    ///
    /// # Errors
    /// As `unlinkat(2)`.
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c = plain_name(name)?;
        // SAFETY: our open descriptor and a NUL-terminated name.
        check(unsafe { libc::unlinkat(self.as_raw_fd(), c.as_ptr(), 0) }).map(drop)
    }

    /// Removes the empty directory `name`.
    ///
    /// # Errors
    /// As `unlinkat(2)` with `AT_REMOVEDIR`.
    pub fn rmdir(&self, name: &OsStr) -> io::Result<()> {
        let c = plain_name(name)?;
        // SAFETY: our open descriptor and a NUL-terminated name.
        check(unsafe { libc::unlinkat(self.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) }).map(drop)
    }

    /// Renames `from` (here) to `to` in `dest`; with `no_replace`, fails
    /// with `AlreadyExists` rather than replace an entry
    /// (`RENAME_NOREPLACE`).
    ///
    /// # Errors
    /// As `renameat2(2)`.
    pub fn rename(&self, from: &OsStr, dest: &Dir, to: &OsStr, no_replace: bool) -> io::Result<()> {
        let f = plain_name(from)?;
        let t = plain_name(to)?;
        let flags = if no_replace {
            libc::RENAME_NOREPLACE
        } else {
            0
        };
        // SAFETY: two open descriptors of ours and NUL-terminated names.
        check(unsafe {
            libc::renameat2(
                self.as_raw_fd(),
                f.as_ptr(),
                dest.as_raw_fd(),
                t.as_ptr(),
                flags,
            )
        })
        .map(drop)
    }

    /// Sets the owner and group of the entry `name`, not followed
    /// (`fchownat(AT_SYMLINK_NOFOLLOW)`); `None` leaves one unchanged.
    ///
    /// # Errors
    /// As `fchownat(2)`.
    pub fn chown(&self, name: &OsStr, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        let c = plain_name(name)?;
        let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
        // SAFETY: our open descriptor and a NUL-terminated name; -1 (as
        // u32::MAX) leaves an id unchanged.
        check(unsafe {
            libc::fchownat(
                self.as_raw_fd(),
                c.as_ptr(),
                u,
                g,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .map(drop)
    }

    /// Sets the mode of the entry `name`. Linux cannot refuse to follow a
    /// link here (`fchmodat` has no working `AT_SYMLINK_NOFOLLOW`): call it
    /// only in a directory no one else can write, or after [`Dir::stat`]
    /// showed no link in one only this process writes.
    ///
    /// # Errors
    /// As `fchmodat(2)`.
    pub fn chmod_private(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = plain_name(name)?;
        // SAFETY: our open descriptor and a NUL-terminated name.
        check(unsafe { libc::fchmodat(self.as_raw_fd(), c.as_ptr(), mode, 0) }).map(drop)
    }

    /// fsyncs the directory (a rename in it made durable).
    ///
    /// # Errors
    /// As `openat(2)` or `fsync(2)`.
    pub fn sync(&self) -> io::Result<()> {
        let dot = CString::new(".").expect("no NUL");
        // SAFETY: our open descriptor and a NUL-terminated name.
        let fd = unsafe {
            openat_raw(
                self.as_raw_fd(),
                &dot,
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
        }?;
        std::fs::File::from(fd).sync_all()
    }
}

/// Pushes `p`'s components onto `stack` so that the first is popped first.
fn push_components(stack: &mut Vec<OsString>, p: &Path) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    stack.extend(comps.into_iter().rev());
}

fn read_link_at(dir: RawFd, name: &CString) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `dir` is open, `name` NUL-terminated, and `buf` is writable
    // for its length; the kernel writes at most that many bytes.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = super::check_len(n)?;
    buf.truncate(n);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vhu-dirfd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn walks_creates_and_refuses_links_in_untrusted_directories() {
        let d = tmp("walk");
        let made = Dir::open(&d.join("a/b"), Some(0o755)).unwrap();
        assert!(made.entry().is_dir());
        assert_eq!(made.path(), d.join("a/b"));
        // A link in a directory of ours (0755) is followed.
        symlink(d.join("a"), d.join("l")).unwrap();
        let via = Dir::open(&d.join("l/b"), None).unwrap();
        assert!(via.entry().same_file(&made.entry()));
        // In a group-writable one it is not.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = Dir::open(&d.join("l/b"), None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("is a symbolic link in"), "{e}");
        // Nor is one under /tmp (world-writable) itself; /tmp/x/.. works.
        let e = Dir::open(&d.join("a/../a/b"), None).unwrap();
        assert!(e.entry().same_file(&made.entry()));
        let e = Dir::open(&d.join("nope"), None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn entries_are_never_followed() {
        let d = tmp("entries");
        let dir = Dir::open(&d, None).unwrap();
        std::fs::write(d.join("victim"), b"keep").unwrap();
        symlink(d.join("victim"), d.join("link")).unwrap();
        assert!(dir.stat(OsStr::new("link")).unwrap().unwrap().is_symlink());
        assert!(dir.stat(OsStr::new("none")).unwrap().is_none());
        let fd = dir.open_entry(OsStr::new("link")).unwrap();
        assert!(stat_fd(&fd).unwrap().is_symlink());
        assert!(dir.subdir(OsStr::new("link")).is_err());
        dir.chown(OsStr::new("link"), None, None).unwrap();
        assert!(
            dir.create_file(OsStr::new("link"), 0o600).is_err(),
            "O_NOFOLLOW"
        );
        dir.unlink(OsStr::new("link")).unwrap();
        assert_eq!(std::fs::read(d.join("victim")).unwrap(), b"keep");
        let mut f = dir.create_file(OsStr::new("new"), 0o600).unwrap();
        std::io::Write::write_all(&mut f, b"x").unwrap();
        assert_eq!(
            std::fs::metadata(d.join("new")).unwrap().mode() & 0o777,
            0o600
        );
        dir.rename(OsStr::new("new"), &dir, OsStr::new("victim"), false)
            .unwrap();
        assert_eq!(std::fs::read(d.join("victim")).unwrap(), b"x");
        dir.mkdir(OsStr::new("sub"), 0o700).unwrap();
        dir.rmdir(OsStr::new("sub")).unwrap();
        dir.sync().unwrap();
        assert!(dir.stat(OsStr::new("a/b")).is_err(), "plain names only");
        std::fs::remove_dir_all(d).unwrap();
    }
}

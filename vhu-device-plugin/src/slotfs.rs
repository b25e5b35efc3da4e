// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! File operations in directories a pod can write, by directory file
//! descriptor and one name at a time, never following a symbolic link.
//!
//! A slot's directory (`<host-dir>/<device>`) is mounted read-write into
//! the pod that got the slot, and a pod owns what is mounted into it: it may
//! leave there files, directories of any depth and mode, sockets, FIFOs and
//! symbolic links to anywhere on the host. Before the slot goes to the next
//! pod the plugin removes the directory with everything in it and makes it
//! anew ([`HostDir::fresh_dir`]), so nothing of the last pod (entries, mode,
//! owner, ACLs, extended attributes) reaches the next one. Every step names
//! one entry relative to an open directory and refuses to follow a link
//! (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`, `unlinkat` of the link itself): a
//! link is removed, never its target.
//!
//! The host directory itself (`--host-dir`) is the administrator's: it is
//! opened by path. Its entries (the slots' directories, and the links of a
//! container's other devices) are the plugin's alone: no pod can write
//! there.
//!
//! Removal ([`remove_tree`]) walks down with one directory descriptor at a
//! time and back up through `..`, checking at every step up that it is the
//! directory it came from (device and inode), so a tree of any depth needs
//! two descriptors, and never leaves the file system it started on.

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{
    fchmod, fchown, fstat, mkdirat, openat, readlinkat, renameat, statat, symlinkat, unlinkat,
    AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid,
};
use rustix::io::Errno;

/// Flags to open a directory entry as a directory, refusing a link.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens `name` in `dir` as a directory; a link is refused (`ELOOP`).
fn open_dir<P: rustix::path::Arg>(dir: BorrowedFd<'_>, name: P) -> rustix::io::Result<OwnedFd> {
    openat(dir, name, dir_flags(), Mode::empty())
}

/// The type of `name` in `dir`, the link itself for a link; `None` when
/// there is nothing.
fn kind<P: rustix::path::Arg>(dir: BorrowedFd<'_>, name: P) -> io::Result<Option<FileType>> {
    match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `Ok` when `r` is, or failed only because the entry is already gone.
fn gone(r: rustix::io::Result<()>) -> io::Result<()> {
    match r {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One directory on the way down: its name in its parent, its identity,
/// and the subdirectories still to remove.
struct Level {
    name: CString,
    dev: u64,
    ino: u64,
    subdirs: Vec<CString>,
}

/// Removes every entry of the open directory `fd` that is not a
/// directory (files, sockets, FIFOs, devices, links: the entry itself), and
/// returns the names of its subdirectories.
fn clear_files(fd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let mut subdirs = Vec::new();
    let mut dir = Dir::read_from(fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let t = match entry.file_type() {
            FileType::Unknown => match kind(fd, name)? {
                Some(t) => t,
                None => continue,
            },
            t => t,
        };
        if t == FileType::Directory {
            subdirs.push(name.to_owned());
        } else {
            gone(unlinkat(fd, name, AtFlags::empty()))?;
        }
    }
    Ok(subdirs)
}

/// Removes `name` in `parent` and, when it is a directory, everything in
/// it, without following any link: a link anywhere in the tree is removed,
/// its target is left alone. Nothing there is not an error. A mount point
/// in the tree, or a directory moved while it is removed, stops it with an
/// error (what was removed stays removed).
///
/// # Errors
/// The first system call that failed.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::other("a name with a NUL byte"))?;
    match kind(parent, name.as_c_str())? {
        None => return Ok(()),
        Some(FileType::Directory) => {}
        Some(_) => return gone(unlinkat(parent, name.as_c_str(), AtFlags::empty())),
    }
    let mut cur = match open_dir(parent, name.as_c_str()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let st = fstat(&cur)?;
    let root_dev = st.st_dev;
    let mut stack = vec![Level {
        name,
        dev: st.st_dev,
        ino: st.st_ino,
        subdirs: clear_files(cur.as_fd())?,
    }];
    loop {
        let top = stack
            .last_mut()
            .expect("the stack holds the root until it is removed");
        if let Some(sub) = top.subdirs.pop() {
            let fd = match open_dir(cur.as_fd(), sub.as_c_str()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                // No longer a directory: remove what is there.
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    gone(unlinkat(&cur, sub.as_c_str(), AtFlags::empty()))?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let st = fstat(&fd)?;
            if st.st_dev != root_dev {
                return Err(io::Error::other(format!(
                    "{} is a mount point",
                    sub.to_string_lossy()
                )));
            }
            cur = fd;
            stack.push(Level {
                name: sub,
                dev: st.st_dev,
                ino: st.st_ino,
                subdirs: clear_files(cur.as_fd())?,
            });
            continue;
        }
        let done = stack.pop().expect("a top level");
        let Some(up) = stack.last() else {
            drop(cur);
            return gone(unlinkat(parent, done.name.as_c_str(), AtFlags::REMOVEDIR));
        };
        let p = open_dir(cur.as_fd(), c"..")?;
        let st = fstat(&p)?;
        if (st.st_dev, st.st_ino) != (up.dev, up.ino) {
            return Err(io::Error::other(format!(
                "{} moved while it was being removed",
                up.name.to_string_lossy()
            )));
        }
        gone(unlinkat(&p, done.name.as_c_str(), AtFlags::REMOVEDIR))?;
        cur = p;
    }
}

/// Whether the open directory `fd` has an entry.
fn has_entries(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut dir = Dir::read_from(fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name != c"." && name != c".." {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A directory opened once, whose entries are named one at a time.
#[derive(Debug)]
pub struct HostDir {
    fd: OwnedFd,
}

impl HostDir {
    /// Opens `path` (made first when `create`), a directory of the
    /// administrator's choosing.
    ///
    /// # Errors
    /// When it cannot be made or opened.
    pub fn open(path: &Path, create: bool) -> io::Result<Self> {
        if create {
            std::fs::create_dir_all(path)?;
        }
        let fd = openat(
            rustix::fs::CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self { fd })
    }

    /// The type of entry `name` (a link's own); `None` when absent.
    ///
    /// # Errors
    /// When it cannot be looked at.
    pub fn kind(&self, name: &str) -> io::Result<Option<FileType>> {
        kind(self.fd.as_fd(), name)
    }

    /// Whether the directory `name` holds anything. A link (a container's
    /// other device) is looked through once, to its target in this
    /// directory when it names one by a plain name; anything else holds
    /// nothing.
    pub fn holds_anything(&self, name: &str) -> bool {
        let name = match self.kind(name) {
            Ok(Some(FileType::Symlink)) => {
                match readlinkat(&self.fd, name, Vec::new()).map(CString::into_string) {
                    Ok(Ok(t)) if !t.contains('/') && t != "." && t != ".." => t,
                    _ => return false,
                }
            }
            Ok(Some(FileType::Directory)) => name.to_owned(),
            _ => return false,
        };
        open_dir(self.fd.as_fd(), name.as_str())
            .map_err(io::Error::from)
            .and_then(|fd| has_entries(fd.as_fd()))
            .unwrap_or(false)
    }

    /// Removes entry `name` whatever it is, with everything under it
    /// ([`remove_tree`]).
    ///
    /// # Errors
    /// See [`remove_tree`].
    pub fn remove(&self, name: &str) -> io::Result<()> {
        remove_tree(self.fd.as_fd(), name)
    }

    /// Replaces entry `name` with a new, empty directory with `uid`, `gid`
    /// and `mode`: what was there (a directory and its content, a link) is
    /// removed first, without following links.
    ///
    /// # Errors
    /// When removing or making it fails.
    pub fn fresh_dir(
        &self,
        name: &str,
        uid: Option<u32>,
        gid: Option<u32>,
        mode: u32,
    ) -> io::Result<()> {
        self.remove(name)?;
        // Private until its owner and mode are set.
        mkdirat(&self.fd, name, Mode::from_raw_mode(0o700))?;
        let fd = open_dir(self.fd.as_fd(), name)?;
        fchown(&fd, uid.map(Uid::from_raw), gid.map(Gid::from_raw))?;
        fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(())
    }

    /// Replaces entry `name` with a symbolic link to `target`.
    ///
    /// # Errors
    /// When removing what was there or making the link fails.
    pub fn fresh_link(&self, target: &str, name: &str) -> io::Result<()> {
        self.remove(name)?;
        symlinkat(target, &self.fd, name)?;
        Ok(())
    }

    /// Writes `bytes` to a new file `name` with `mode`, replacing what was
    /// there atomically (through `<name>.tmp`, never through a link).
    ///
    /// # Errors
    /// When a step fails.
    pub fn write_file(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        let tmp = format!("{name}.tmp");
        gone(unlinkat(&self.fd, tmp.as_str(), AtFlags::empty()))?;
        let fd = openat(
            &self.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        fchmod(&fd, Mode::from_raw_mode(mode))?;
        std::fs::File::from(fd).write_all(bytes)?;
        renameat(&self.fd, tmp.as_str(), &self.fd, name)?;
        Ok(())
    }

    /// Removes the file `name` (a link itself); nothing there is fine.
    ///
    /// # Errors
    /// When it cannot be removed.
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        gone(unlinkat(&self.fd, name, AtFlags::empty()))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{symlink, MetadataExt};

    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vhu-dp-slotfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn remove_tree_removes_links_not_their_targets() {
        let base = scratch("links");
        let victim = base.join("victim");
        std::fs::create_dir_all(victim.join("sub")).unwrap();
        std::fs::write(victim.join("keep"), b"data").unwrap();
        let slot = base.join("host/slot");
        std::fs::create_dir_all(slot.join("a/b/c")).unwrap();
        std::fs::write(slot.join("a/b/c/f"), b"x").unwrap();
        symlink(&victim, slot.join("link")).unwrap();
        symlink(&victim, slot.join("a/b/deep-link")).unwrap();
        symlink(victim.join("keep"), slot.join("a/file-link")).unwrap();
        std::os::unix::net::UnixListener::bind(slot.join("sock")).unwrap();
        let host = HostDir::open(&base.join("host"), false).unwrap();
        host.remove("slot").unwrap();
        assert!(!slot.exists());
        assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"data");
        assert!(victim.join("sub").is_dir());
        host.remove("slot").unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_deep_tree_needs_few_descriptors() {
        let base = scratch("deep");
        // Deeper than PATH_MAX: made through relative paths.
        let mut fd = HostDir::open(&base.join("host"), true).unwrap().fd;
        mkdirat(&fd, "slot", Mode::from_raw_mode(0o755)).unwrap();
        fd = open_dir(fd.as_fd(), "slot").unwrap();
        for _ in 0..3000 {
            mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = open_dir(fd.as_fd(), "d").unwrap();
        }
        drop(fd);
        let host = HostDir::open(&base.join("host"), false).unwrap();
        host.remove("slot").unwrap();
        assert_eq!(host.kind("slot").unwrap(), None);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn fresh_dir_and_link_replace_what_was_there() {
        let base = scratch("fresh");
        let host_path = base.join("host");
        std::fs::create_dir_all(host_path.join("vhu1/x")).unwrap();
        std::fs::write(host_path.join("vhu1/x/f"), b"x").unwrap();
        let host = HostDir::open(&host_path, false).unwrap();
        assert!(host.holds_anything("vhu1"));
        host.fresh_dir("vhu1", None, None, 0o750).unwrap();
        let m = std::fs::symlink_metadata(host_path.join("vhu1")).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o7777, 0o750);
        assert!(!host.holds_anything("vhu1"));
        host.fresh_link("vhu1", "vhu2").unwrap();
        assert_eq!(
            std::fs::read_link(host_path.join("vhu2")).unwrap(),
            Path::new("vhu1")
        );
        std::fs::write(host_path.join("vhu1/s"), b"").unwrap();
        assert!(host.holds_anything("vhu2"), "looked through the link once");
        host.fresh_dir("vhu2", None, None, 0o700).unwrap();
        assert!(host_path.join("vhu1/s").exists(), "the link's target stays");
        host.write_file("info.json", b"{}", 0o444).unwrap();
        let m = std::fs::symlink_metadata(host_path.join("info.json")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o444);
        host.remove_file("info.json").unwrap();
        host.remove_file("info.json").unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}

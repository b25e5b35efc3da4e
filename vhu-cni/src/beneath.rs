// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! File operations beneath a directory a tenant may write, that never
//! follow a link there.
//!
//! A pod owns the directories mounted into it (its `emptyDir`, a device
//! plugin's slot), and may put a symlink where the plugin is about to
//! create, chown or remove something. Every operation here starts from a
//! directory the node's administrator names (opened as a path: its own
//! components are trusted), then works relative to held directory fds:
//! each further component is opened with `O_NOFOLLOW|O_DIRECTORY`,
//! created with `mkdirat` (which fails on anything already there, a link
//! included), given its owner and mode through its fd, and removed with
//! `unlinkat`, which removes a link itself and never its target. A file is
//! written as a new file (`O_CREAT|O_EXCL|O_NOFOLLOW`) renamed over the
//! old name, so a link in its place is replaced, not written through.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

/// How deep [`remove_tree`] goes into what a pod left before it gives up
/// (a bound on the work a tenant can cause, and on the stack).
pub const MAX_TREE_DEPTH: usize = 16;
/// How many entries [`remove_tree`] removes at most, in all.
pub const MAX_TREE_ENTRIES: usize = 10_000;

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// Opens a directory the administrator named (its components may be
/// links: they are the administrator's).
///
/// # Errors
/// The `open` error.
pub fn open_trusted_dir(path: &Path) -> std::io::Result<OwnedFd> {
    rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)
}

/// One plain component: not empty, `.`, `..`, and without `/`.
fn check_name(name: &OsStr) -> std::io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?} is not a single path component"),
        ));
    }
    Ok(())
}

/// Opens directory `name` in `dir` without following a link.
///
/// # Errors
/// `ELOOP`/`ENOTDIR` when it is a link or not a directory.
pub fn open_dir_at(dir: impl AsFd, name: &OsStr) -> std::io::Result<OwnedFd> {
    check_name(name)?;
    rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)
}

/// Walks the relative path `rel` from `dir`, one component at a time, no
/// link followed.
///
/// # Errors
/// `InvalidInput` for a path that is not relative and plain; the `openat`
/// error of the first component that is missing, a link or not a directory.
pub fn walk(dir: impl AsFd, rel: &Path) -> std::io::Result<OwnedFd> {
    let mut cur = rfs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not a plain relative path", rel.display()),
            ));
        };
        cur = open_dir_at(&cur, name)?;
    }
    Ok(cur)
}

/// Creates directory `name` in `dir` (it must not exist: nothing, not even
/// a link, may be there) and returns it opened, with `owner`/`group` and
/// `mode` set through its fd.
///
/// # Errors
/// `AlreadyExists` when anything is at `name`; the failing call's error.
pub fn make_dir(
    dir: impl AsFd,
    name: &OsStr,
    owner: Option<u32>,
    group: Option<u32>,
    mode: u32,
) -> std::io::Result<OwnedFd> {
    check_name(name)?;
    let dir = dir.as_fd();
    rfs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(io)?;
    let fd = open_dir_at(dir, name)?;
    if owner.is_some() || group.is_some() {
        rfs::fchown(&fd, owner.map(Uid::from_raw), group.map(Gid::from_raw)).map_err(io)?;
    }
    rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io)?;
    Ok(fd)
}

/// Opens directory `name` in `dir`, creating it (mode `mode`) when it is
/// missing; never through a link.
///
/// # Errors
/// The failing call's error (`ELOOP`/`ENOTDIR` for a link or a file).
pub fn ensure_dir(dir: impl AsFd, name: &OsStr, mode: u32) -> std::io::Result<OwnedFd> {
    check_name(name)?;
    let dir = dir.as_fd();
    match rfs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(io(e)),
    }
    open_dir_at(dir, name)
}

/// Opens directory `name` in `dir`, creating it when it is missing, and
/// gives it `owner`/`group` and `mode` through its fd; never through a
/// link.
///
/// # Errors
/// The failing call's error (`ELOOP`/`ENOTDIR` for a link or a file).
pub fn ensure_dir_owned(
    dir: impl AsFd,
    name: &OsStr,
    owner: Option<u32>,
    group: Option<u32>,
    mode: u32,
) -> std::io::Result<OwnedFd> {
    let fd = ensure_dir(dir, name, 0o700)?;
    if owner.is_some() || group.is_some() {
        rfs::fchown(&fd, owner.map(Uid::from_raw), group.map(Gid::from_raw)).map_err(io)?;
    }
    rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io)?;
    Ok(fd)
}

/// Whether anything (a link included) is at `name` in `dir`.
///
/// # Errors
/// A `statat` error other than "not found".
pub fn exists(dir: impl AsFd, name: &OsStr) -> std::io::Result<bool> {
    check_name(name)?;
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(io(e)),
    }
}

/// Writes `body` as file `name` in `dir` with `mode`: a new file renamed
/// over whatever was at `name` (a link there is replaced, not followed).
///
/// # Errors
/// The failing call's error.
pub fn write_file(dir: impl AsFd, name: &OsStr, body: &[u8], mode: u32) -> std::io::Result<()> {
    check_name(name)?;
    let dir = dir.as_fd();
    let mut tmp = name.as_bytes().to_vec();
    tmp.extend_from_slice(format!(".{}.tmp", std::process::id()).as_bytes());
    let tmp = OsStr::from_bytes(&tmp);
    let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
    let fd = rfs::openat(
        dir,
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(io)?;
    let written = (|| {
        rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io)?;
        let mut f = std::fs::File::from(fd);
        f.write_all(body)?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|()| rfs::renameat(dir, tmp, dir, name).map_err(io)) {
        let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
        return Err(e);
    }
    Ok(())
}

/// Reads file `name` in `dir` (not through a link), at most `max` bytes.
///
/// # Errors
/// The failing call's error; `InvalidData` when it is larger.
pub fn read_file(dir: impl AsFd, name: &OsStr, max: usize) -> std::io::Result<Vec<u8>> {
    check_name(name)?;
    let fd = rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), max as u64 + 1),
        &mut out,
    )?;
    if out.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{name:?} is larger than {max} bytes"),
        ));
    }
    Ok(out)
}

/// Removes `name` from `dir` if it is not a directory (a file, a socket,
/// a link: the link itself). Missing is fine.
///
/// # Errors
/// The `unlinkat` error (`EISDIR` for a directory).
pub fn remove_file(dir: impl AsFd, name: &OsStr) -> std::io::Result<()> {
    check_name(name)?;
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Removes the empty directory `name` from `dir`. Missing is fine.
///
/// # Errors
/// The `unlinkat` error (`ENOTEMPTY`, `ENOTDIR`).
pub fn remove_empty_dir(dir: impl AsFd, name: &OsStr) -> std::io::Result<()> {
    check_name(name)?;
    match rfs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Removes `name` from `dir` with everything under it, never following a
/// link (a link is removed itself), at most [`MAX_TREE_DEPTH`] deep and
/// [`MAX_TREE_ENTRIES`] entries. Missing is fine.
///
/// # Errors
/// The first failing call's error; `Other` when the tree is deeper or
/// larger than the bounds (what was removed stays removed).
pub fn remove_tree(dir: impl AsFd, name: &OsStr) -> std::io::Result<()> {
    let mut budget = MAX_TREE_ENTRIES;
    remove_tree_at(dir.as_fd(), name, 0, &mut budget)
}

fn remove_tree_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &OsStr,
    depth: usize,
    budget: &mut usize,
) -> std::io::Result<()> {
    check_name(name)?;
    if *budget == 0 || depth > MAX_TREE_DEPTH {
        return Err(std::io::Error::other(format!(
            "more than {MAX_TREE_ENTRIES} entries or {MAX_TREE_DEPTH} levels to remove"
        )));
    }
    *budget -= 1;
    let sub = match rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        // A link or anything that is not a directory: remove the entry.
        Err(Errno::LOOP | Errno::NOTDIR) => return remove_file(dir, name),
        Err(e) => return Err(io(e)),
    };
    let mut names = Vec::new();
    let mut entries = Dir::read_from(&sub).map_err(io)?;
    while let Some(e) = entries.read() {
        let e = e.map_err(io)?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        names.push((n.to_vec(), e.file_type() == FileType::Directory));
        if names.len() > *budget {
            break;
        }
    }
    for (n, is_dir) in names {
        let n = OsStr::from_bytes(&n);
        if is_dir {
            remove_tree_at(sub.as_fd(), n, depth + 1, budget)?;
        } else {
            if *budget == 0 {
                return Err(std::io::Error::other(format!(
                    "more than {MAX_TREE_ENTRIES} entries to remove"
                )));
            }
            *budget -= 1;
            remove_file(&sub, n)?;
        }
    }
    remove_empty_dir(dir, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vhu-beneath-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn links_are_never_followed() {
        let d = scratch("links");
        let victim = d.join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("keep"), b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("link")).unwrap();
        let root = open_trusted_dir(&d).unwrap();
        let link = OsStr::new("link");
        // mkdir over a link: refused.
        let e = make_dir(&root, link, None, None, 0o700).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        // open through a link: refused.
        assert!(open_dir_at(&root, link).is_err());
        assert!(walk(&root, Path::new("link")).is_err());
        assert!(ensure_dir(&root, link, 0o700).is_err());
        // write over a link: the link is replaced, the victim untouched.
        std::os::unix::fs::symlink(victim.join("keep"), d.join("file")).unwrap();
        write_file(&root, OsStr::new("file"), b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"precious");
        assert_eq!(std::fs::read(d.join("file")).unwrap(), b"new");
        assert!(!std::fs::symlink_metadata(d.join("file"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::metadata(d.join("file"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        // reading through a link: refused.
        std::os::unix::fs::symlink(victim.join("keep"), d.join("rl")).unwrap();
        assert!(read_file(&root, OsStr::new("rl"), 100).is_err());
        // removing a tree with a link in it removes the link only.
        let t = make_dir(&root, OsStr::new("tree"), None, None, 0o755).unwrap();
        std::fs::create_dir_all(d.join("tree/a/b")).unwrap();
        std::fs::write(d.join("tree/a/b/f"), b"x").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("tree/a/v")).unwrap();
        drop(t);
        remove_tree(&root, OsStr::new("tree")).unwrap();
        assert!(!d.join("tree").exists());
        assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"precious");
        // remove_tree of a link: the link goes, the victim stays.
        remove_tree(&root, link).unwrap();
        assert!(victim.join("keep").exists() && !d.join("link").exists());
        assert!(check_name(OsStr::new("..")).is_err());
        assert!(check_name(OsStr::new("a/b")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn make_dir_sets_mode_on_the_fd() {
        let d = scratch("mode");
        let root = open_trusted_dir(&d).unwrap();
        make_dir(&root, OsStr::new("x"), None, None, 0o750).unwrap();
        assert_eq!(
            std::fs::metadata(d.join("x")).unwrap().permissions().mode() & 0o777,
            0o750
        );
        assert!(exists(&root, OsStr::new("x")).unwrap());
        assert!(!exists(&root, OsStr::new("y")).unwrap());
        let deep = d.join("deep");
        let mut p = deep.clone();
        for _ in 0..(MAX_TREE_DEPTH + 3) {
            p = p.join("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        assert!(remove_tree(&root, OsStr::new("deep")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Ports created through the API survive restarts: they are written to
//! `<state_dir>/ports.json` after every change and re-created at start.
//!
//! A write never leaves a torn file: the new content goes to a temporary file
//! in the same directory, which is fsynced, renamed over the old one, and the
//! directory is fsynced so that the rename itself is durable. A crash at any
//! point leaves either the old list or the new one.
//!
//! The file is the switch's alone: mode `0600` (it names every tenant's
//! sockets, namespaces and MACs), written in the state directory held open
//! (a missing one is made `0700`), the temporary file created with
//! `O_NOFOLLOW` after any leftover of that name is unlinked (so a link put
//! there is neither followed nor written through, and a leftover's looser
//! mode is not inherited), and renamed relative to the held directory.
//!
//! The file is `{"version": 1, "ports": [<port objects>]}`. A file that does
//! not parse is not silently replaced: loading it fails with its path, and
//! the operator decides.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vhost_net_backend::sys::dirfd::Dir;
use vhu_api::PortSpec;

/// The file's name under the state directory.
pub const FILE_NAME: &str = "ports.json";
/// The format version written.
pub const VERSION: u32 = 1;
/// The file's mode: the switch's alone.
pub const FILE_MODE: u32 = 0o600;
/// The mode of a state directory the switch makes.
const DIR_MODE: u32 = 0o700;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    version: u32,
    ports: Vec<PortSpec>,
}

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// An I/O step failed.
    #[error("{path}: cannot {step}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        step: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file is not a state file of a version we read.
    #[error("{path}: not a valid state file ({reason}); fix or remove it")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The persisted port list of one state directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in `dir` (created on the first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// The persisted ports; empty if there is no file yet.
    ///
    /// # Errors
    /// The file exists but cannot be read or parsed.
    pub fn load(&self) -> Result<Vec<PortSpec>, PersistError> {
        let path = self.path();
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(PersistError::Io {
                    path,
                    step: "read",
                    source,
                })
            }
        };
        let s: Stored = serde_json::from_slice(&text).map_err(|e| PersistError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if s.version != VERSION {
            return Err(PersistError::Invalid {
                path,
                reason: format!("version {} (this switch reads {VERSION})", s.version),
            });
        }
        Ok(s.ports)
    }

    /// Replaces the persisted list, durably (see the module documentation).
    ///
    /// # Errors
    /// A step failed; the previous list is intact.
    pub fn save(&self, ports: &[PortSpec]) -> Result<(), PersistError> {
        let io = |path: &Path, step: &'static str| {
            let path = path.to_owned();
            move |source| PersistError::Io { path, step, source }
        };
        let dir_path = std::path::absolute(&self.dir).map_err(io(&self.dir, "resolve"))?;
        let dir =
            Dir::open(&dir_path, Some(DIR_MODE)).map_err(io(&self.dir, "open the directory"))?;
        let body = serde_json::to_vec_pretty(&Stored {
            version: VERSION,
            ports: ports.to_vec(),
        })
        .map_err(|e| PersistError::Invalid {
            path: self.path(),
            reason: e.to_string(),
        })?;
        let tmp_name = format!(".{FILE_NAME}.tmp");
        let tmp_name = OsStr::new(&tmp_name);
        let tmp = self.dir.join(tmp_name);
        match dir.unlink(tmp_name) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io(&tmp, "remove")(e)),
            _ => {}
        }
        let mut f = dir
            .create_file(tmp_name, FILE_MODE)
            .map_err(io(&tmp, "create"))?;
        // Whatever the umask: the file is the switch's alone.
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(FILE_MODE))
            .map_err(io(&tmp, "set the mode of"))?;
        f.write_all(&body).map_err(io(&tmp, "write"))?;
        f.write_all(b"\n").map_err(io(&tmp, "write"))?;
        f.sync_all().map_err(io(&tmp, "fsync"))?;
        drop(f);
        let path = self.path();
        dir.rename(tmp_name, &dir, OsStr::new(FILE_NAME), false)
            .map_err(io(&path, "rename the new state over"))?;
        dir.sync().map_err(io(&self.dir, "fsync the directory"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use vhu_api::PortKind;

    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vhu-persist-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_replace() {
        let dir = tmpdir("rt");
        let s = Store::new(dir.join("nested"));
        assert_eq!(s.load().unwrap(), vec![]);
        let mut a = PortSpec::new("vm1", PortKind::VhostUser);
        a.queues = Some(2);
        let mut b = PortSpec::new("up", PortKind::AfPacket);
        b.interface = Some("eth0".into());
        s.save(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(s.load().unwrap(), vec![a.clone(), b]);
        s.save(&[a.clone()]).unwrap();
        assert_eq!(s.load().unwrap(), vec![a]);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.join("nested"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
        use std::os::unix::fs::MetadataExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&s.path()), 0o600);
        assert_eq!(mode(&dir.join("nested")), 0o700);
        // A link left at the temporary file's name is replaced, not
        // written through; an existing file's looser mode goes.
        let victim = dir.join("victim");
        fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(
            &victim,
            dir.join("nested").join(format!(".{FILE_NAME}.tmp")),
        )
        .unwrap();
        fs::set_permissions(
            s.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        s.save(&[]).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert_eq!(mode(&s.path()), 0o600);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_an_empty_list() {
        let dir = tmpdir("bad");
        fs::create_dir_all(&dir).unwrap();
        let s = Store::new(&dir);
        fs::write(s.path(), b"{\"version\": 1, \"ports\": [").unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("not a valid state file"), "{e}");
        fs::write(s.path(), b"{\"version\": 9, \"ports\": []}").unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("version 9"), "{e}");
        fs::remove_dir_all(dir).unwrap();
    }
}

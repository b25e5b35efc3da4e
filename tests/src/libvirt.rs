// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! libvirt as KubeVirt drives QEMU: the system daemons (`virtlogd`,
//! `libvirtd`, started by hand when they do not run: there is no systemd)
//! and transient test domains defined and started with `virsh`.
//!
//! `scripts/install-peers.sh` installs libvirt 11 from bookworm-backports;
//! QEMU then runs as `libvirt-qemu` (see [`QEMU_USER`]), so whatever it
//! opens or creates (kernel, initramfs, console file, vhost-user socket
//! directory) must be reachable by that user. A missing libvirt fails the
//! test, naming the install script.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The connection URI: the system daemon (QEMU as [`QEMU_USER`]).
pub const URI: &str = "qemu:///system";

/// The user libvirt runs QEMU as.
pub const QEMU_USER: &str = "libvirt-qemu";

const HINT: &str = "run `sudo scripts/install-peers.sh` (installs libvirt from bookworm-backports)";

/// Runs `virsh -c URI args...`.
pub fn virsh(args: &[&str]) -> Output {
    Command::new("virsh")
        .args(["-q", "-c", URI])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run virsh: {e}; {HINT}"))
}

/// [`virsh`] that must succeed; its stdout.
pub fn virsh_ok(args: &[&str]) -> String {
    let out = virsh(args);
    assert!(
        out.status.success(),
        "virsh {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The libvirt daemons; those this process started are stopped on drop
/// (by their pid files).
#[derive(Debug)]
pub struct Libvirt {
    started: Vec<PathBuf>,
}

impl Libvirt {
    /// Connects to the running daemons, or starts `virtlogd -d` and
    /// `libvirtd -d` and waits until `virsh version` answers.
    ///
    /// # Panics
    ///
    /// If libvirt is not installed or the daemon does not come up in 30 s.
    pub fn start() -> Self {
        let mut l = Self {
            started: Vec::new(),
        };
        if virsh(&["version"]).status.success() {
            return l;
        }
        for (daemon, pid) in [
            ("virtlogd", "/run/virtlogd.pid"),
            ("libvirtd", "/run/libvirtd.pid"),
        ] {
            let st = Command::new(daemon)
                .arg("-d")
                .status()
                .unwrap_or_else(|e| panic!("cannot start {daemon}: {e}; {HINT}"));
            assert!(st.success(), "{daemon} -d failed: {st}");
            l.started.push(pid.into());
        }
        let t0 = Instant::now();
        while !virsh(&["version"]).status.success() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "libvirtd does not answer after 30 s: {}",
                String::from_utf8_lossy(&virsh(&["version"]).stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        l
    }

    /// The daemon's version line (`Running against daemon: 11.3.0`, ...).
    pub fn version(&self) -> String {
        virsh_ok(&["version"])
    }
}

impl Drop for Libvirt {
    fn drop(&mut self) {
        // Newest first: libvirtd, then virtlogd.
        for pid_file in self.started.iter().rev() {
            if let Some(pid) = std::fs::read_to_string(pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}

/// A domain defined from XML; destroyed and undefined on drop.
#[derive(Debug)]
pub struct Domain {
    /// Its name.
    pub name: String,
}

impl Domain {
    /// `virsh define` of `xml` (written to `dir/<name>.xml`).
    ///
    /// # Panics
    ///
    /// If libvirt refuses the XML; the message has libvirt's reason.
    pub fn define(dir: &Path, name: &str, xml: &str) -> Self {
        let file = dir.join(format!("{name}.xml"));
        std::fs::write(&file, xml).expect("write the domain XML");
        let out = virsh(&["define", file.to_str().expect("UTF-8 path")]);
        assert!(
            out.status.success(),
            "libvirt refused the domain: {}\n{xml}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { name: name.into() }
    }

    /// `virsh start` in the background (with `mode='server'` vhost-user
    /// interfaces it returns only once a backend connected).
    pub fn start(&self) -> std::process::Child {
        Command::new("virsh")
            .args(["-q", "-c", URI, "start", &self.name])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn virsh start")
    }

    /// `virsh domstate`: `running`, `shut off`, ...
    pub fn state(&self) -> String {
        virsh_ok(&["domstate", &self.name]).trim().to_owned()
    }

    /// The running QEMU's pid (libvirt's pid file).
    pub fn qemu_pid(&self) -> Option<u32> {
        std::fs::read_to_string(format!("/run/libvirt/qemu/{}.pid", self.name))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The live definition (`virsh dumpxml`).
    pub fn dumpxml(&self) -> String {
        virsh_ok(&["dumpxml", &self.name])
    }

    /// Waits until the domain is `shut off` (the guest powered off).
    ///
    /// # Panics
    ///
    /// After `timeout`, with `what` (e.g. the console).
    pub fn wait_shut_off(&self, timeout: Duration, what: impl Fn() -> String) {
        let t0 = Instant::now();
        while self.state() != "shut off" {
            assert!(
                t0.elapsed() < timeout,
                "domain {} still {} after {timeout:?}\n{}",
                self.name,
                self.state(),
                what()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        let _ = virsh(&["destroy", &self.name]);
        let _ = virsh(&["undefine", &self.name]);
    }
}

/// `chown USER:GROUP path` (names), for what QEMU must open.
///
/// # Panics
///
/// If chown fails.
pub fn chown(path: &Path, owner: &str) {
    let st = Command::new("chown")
        .arg(owner)
        .arg(path)
        .status()
        .expect("run chown");
    assert!(st.success(), "chown {owner} {}", path.display());
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! A pod owns its socket directories and may put symbolic links there; the
//! switch (root here) must not be turned by them into an operation on
//! someone else's file (docs/switch.md, "Sockets in a tenant's directory").
//! Each test is one attack, made by the test as the "pod" (directories
//! owned by uid [`POD`]), against the release switch; each asserts the
//! refusal and that nothing outside the attacker's own directory changed.
//!
//! * `server_socket_through_a_linked_directory_is_refused`: `<pod>/eth1` is
//!   a link to a victim directory; a server port at `<pod>/eth1/sock` (with
//!   `owner`, `mode`) is refused with 422 naming the link, and the victim
//!   directory's entries, owner and mode are unchanged (the old code bound
//!   and chowned a socket in it).
//! * `directories_are_not_created_through_a_link`: under the switch's own
//!   socket directory, `<sockets>/pod/eth1` is a link to a victim
//!   directory; a port at `<sockets>/pod/eth1/new/sock` is refused, and no
//!   `new` appears in the victim (the old code's `create_dir_all` made it).
//! * `stale_socket_through_a_link_is_not_removed`: a victim's stale socket
//!   reached through `<pod>/eth1` (a link to its directory) is neither
//!   removed nor replaced (the old code removed it and bound its own
//!   there); a stale socket name that is itself a link to a victim file is
//!   refused and the file keeps its content.
//! * `cleanup_does_not_unlink_through_a_link`: a server port's socket
//!   directory is swapped for a link to a victim directory holding a file
//!   of the socket's name; `DELETE` of the port leaves the victim's file
//!   (the old code's cleanup unlinked it) and removes the switch's own
//!   socket where it went.
//! * `client_socket_that_is_a_link_is_refused`: a client-role port whose
//!   socket is a link to another tenant's listening socket is refused with
//!   422, and one whose link appears after the port was created never
//!   connects through it (3 s of retries): the victim's listener sees no
//!   connection (the old code connected).
//! * `client_socket_of_another_uid_is_refused`: a socket in the pod's
//!   directory owned by a third uid is refused; one owned by the
//!   directory's owner is accepted and connected to.
//! * `state_files_are_0600_and_the_switch_is_confined`: `ports.json` is
//!   `0600`; no thread of the switch holds `CAP_DAC_OVERRIDE` (CapEff,
//!   CapPrm, CapBnd); every thread, a port's control thread included, has
//!   `Seccomp: 2` (filter mode) and one filter; with `--seccomp off`,
//!   `Seccomp: 0`.
//!
//! They need root (chown to other uids): run them under the e2e lock with
//! `--include-ignored --test-threads=1`.

use std::io;
use std::os::unix::fs::{chown, symlink, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vhu_api::PortView;
use vhu_tests::process::RunDir;
use vhu_tests::switch::SwitchProc;

/// The attacking pod's uid (owner of its directories).
const POD: u32 = 4242;
/// Another tenant's uid.
const OTHER: u32 = 4343;

/// A directory owned by `uid`, of the switch's group (root's: the switch
/// holds no `CAP_DAC_OVERRIDE`, its group lets it in), mode 0770: a
/// tenant's, as the CNI makes it.
fn tenant_dir(p: &Path, uid: u32) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o770)).unwrap();
    chown(p, Some(uid), Some(0)).unwrap();
    p.to_owned()
}

/// A victim directory (root's, 0755) with a file `keep`.
fn victim_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(p.join("keep"), b"victim's").unwrap();
    p.to_owned()
}

/// A directory's entries (sorted, with owner and mode), its own owner and
/// mode: what must not change.
fn snapshot(p: &Path) -> (Vec<(String, u32, u32)>, u32, u32) {
    let mut v: Vec<_> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                md.uid(),
                md.mode(),
            )
        })
        .collect();
    v.sort();
    let md = std::fs::metadata(p).unwrap();
    (v, md.uid(), md.mode())
}

fn port_names(sw: &SwitchProc) -> Vec<String> {
    let v: Vec<PortView> = sw.get("/ports");
    v.into_iter().map(|p| p.spec.name).collect()
}

/// `POST /ports` of `body` is refused with a 4xx containing `want`; the
/// port list is unchanged.
fn refused(sw: &SwitchProc, body: &str, want: &str) -> String {
    let before = port_names(sw);
    let (status, out) = sw
        .try_call("POST", "/ports", Some(body.as_bytes()))
        .unwrap();
    let e: vhu_api::ApiError = serde_json::from_slice(&out).expect("an error body");
    assert!(
        (400..500).contains(&status),
        "{body}: {status} {}\n{}",
        e.error,
        sw.log()
    );
    assert!(e.error.contains(want), "{want:?} not in {:?}", e.error);
    assert_eq!(port_names(sw), before, "a refused port changed the list");
    e.error
}

fn vhost(name: &str, socket: &Path, extra: &str) -> String {
    format!(
        r#"{{"name":"{name}","kind":"vhost-user","socket":"{}"{extra}}}"#,
        socket.display()
    )
}

/// Whether `l` (non-blocking) gets a connection within `within`.
fn sees_connection(l: &UnixListener, within: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        match l.accept() {
            Ok(_) => return true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    false
}

/// A listening socket at `p`, non-blocking, owned by `uid` and the
/// switch's group (root's), mode 0660: a VMM's.
fn listener(p: &Path, uid: u32) -> UnixListener {
    let l = UnixListener::bind(p).unwrap();
    l.set_nonblocking(true).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o660)).unwrap();
    chown(p, Some(uid), Some(0)).unwrap();
    l
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn server_socket_through_a_linked_directory_is_refused() {
    let run = RunDir::new("paths-srv");
    let sw = SwitchProc::start(&run, "", &[]);
    let victim = victim_dir(&run.join("victim"));
    let pod = tenant_dir(&run.join("pod"), POD);
    symlink(&victim, pod.join("eth1")).unwrap();
    let before = snapshot(&victim);
    let m = refused(
        &sw,
        &vhost(
            "p",
            &pod.join("eth1/sock"),
            r#","owner":"4242","mode":"0666""#,
        ),
        "is a symbolic link in",
    );
    assert!(m.contains(&pod.join("eth1").display().to_string()), "{m}");
    assert_eq!(snapshot(&victim), before, "the victim directory changed");
    // Through the real directory, the same port is made, with its owner
    // and mode.
    std::fs::remove_file(pod.join("eth1")).unwrap();
    tenant_dir(&pod.join("eth1"), POD);
    sw.call(
        "POST",
        "/ports",
        &vhost(
            "p",
            &pod.join("eth1/sock"),
            r#","owner":"4242","mode":"0660""#,
        ),
        201,
    );
    let md = std::fs::symlink_metadata(pod.join("eth1/sock")).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o7777), (POD, 0o660));
    let names: Vec<_> = std::fs::read_dir(pod.join("eth1")).unwrap().collect();
    assert_eq!(names.len(), 1, "no private bind directory left");
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn directories_are_not_created_through_a_link() {
    let run = RunDir::new("paths-mkdir");
    let sw = SwitchProc::start(&run, "", &[]);
    let victim = victim_dir(&run.join("victim"));
    let pod = tenant_dir(&sw.sockets.join("pod"), POD);
    symlink(&victim, pod.join("eth1")).unwrap();
    let before = snapshot(&victim);
    refused(
        &sw,
        &vhost("p", &pod.join("eth1/new/sock"), ""),
        "is a symbolic link in",
    );
    assert_eq!(snapshot(&victim), before, "the victim directory changed");
    assert!(!victim.join("new").exists());
    // Missing directories of its own are still made.
    sw.call(
        "POST",
        "/ports",
        &vhost("q", &sw.sockets.join("made/here/q.sock"), ""),
        201,
    );
    assert!(sw.sockets.join("made/here/q.sock").exists());
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn stale_socket_through_a_link_is_not_removed() {
    let run = RunDir::new("paths-stale");
    let sw = SwitchProc::start(&run, "", &[]);
    let victim = victim_dir(&run.join("victim"));
    // Another tenant's socket, stale (its server is gone).
    drop(listener(&victim.join("vm.sock"), OTHER));
    let ino = std::fs::symlink_metadata(victim.join("vm.sock"))
        .unwrap()
        .ino();
    let pod = tenant_dir(&run.join("pod"), POD);
    symlink(&victim, pod.join("eth1")).unwrap();
    refused(
        &sw,
        &vhost("p", &pod.join("eth1/vm.sock"), ""),
        "is a symbolic link in",
    );
    let md = std::fs::symlink_metadata(victim.join("vm.sock")).unwrap();
    assert_eq!(
        (md.ino(), md.uid()),
        (ino, OTHER),
        "the victim's socket was replaced"
    );
    // A "stale socket" that is a link to a victim file.
    let d = tenant_dir(&run.join("pod2"), POD);
    symlink(victim.join("keep"), d.join("sock")).unwrap();
    refused(
        &sw,
        &vhost("p", &d.join("sock"), ""),
        "exists and is not a socket",
    );
    assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"victim's");
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn cleanup_does_not_unlink_through_a_link() {
    let run = RunDir::new("paths-clean");
    let sw = SwitchProc::start(&run, "", &[]);
    let victim = victim_dir(&run.join("victim"));
    std::fs::write(victim.join("sock"), b"victim's socket-named file").unwrap();
    let pod = tenant_dir(&run.join("pod"), POD);
    tenant_dir(&pod.join("eth1"), POD);
    sw.call(
        "POST",
        "/ports",
        &vhost("p", &pod.join("eth1/sock"), ""),
        201,
    );
    // The pod moves its directory away and links the name to the victim.
    std::fs::rename(pod.join("eth1"), pod.join("moved")).unwrap();
    symlink(&victim, pod.join("eth1")).unwrap();
    let before = snapshot(&victim);
    sw.call("DELETE", "/ports/p", "", 204);
    assert_eq!(snapshot(&victim), before, "the victim directory changed");
    assert_eq!(
        std::fs::read(victim.join("sock")).unwrap(),
        b"victim's socket-named file"
    );
    assert!(
        !pod.join("moved/sock").exists(),
        "the switch's own socket is removed where it went"
    );
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn client_socket_that_is_a_link_is_refused() {
    let run = RunDir::new("paths-client");
    let sw = SwitchProc::start(&run, "", &[]);
    let victim = tenant_dir(&run.join("victim"), OTHER);
    let l = listener(&victim.join("vm.sock"), OTHER);
    let pod = tenant_dir(&run.join("pod"), POD);
    symlink(victim.join("vm.sock"), pod.join("vm.sock")).unwrap();
    refused(
        &sw,
        &vhost("c", &pod.join("vm.sock"), r#","role":"client""#),
        "is a symbolic link",
    );
    assert!(!sees_connection(&l, Duration::from_millis(500)));
    // The link appears after the port was made (the VMM not started yet):
    // every attempt checks it again.
    sw.call(
        "POST",
        "/ports",
        &vhost("c2", &pod.join("later.sock"), r#","role":"client""#),
        201,
    );
    symlink(victim.join("vm.sock"), pod.join("later.sock")).unwrap();
    assert!(
        !sees_connection(&l, Duration::from_secs(3)),
        "the switch connected through the link\n{}",
        sw.log()
    );
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn client_socket_of_another_uid_is_refused() {
    let run = RunDir::new("paths-owner");
    let sw = SwitchProc::start(&run, "", &[]);
    let pod = tenant_dir(&run.join("pod"), POD);
    let l = listener(&pod.join("foreign.sock"), OTHER);
    refused(
        &sw,
        &vhost("c", &pod.join("foreign.sock"), r#","role":"client""#),
        "is owned by uid 4343",
    );
    assert!(!sees_connection(&l, Duration::from_millis(500)));
    // The VMM's own socket (the directory's owner's) is connected to.
    let ok = listener(&pod.join("vm.sock"), POD);
    sw.call(
        "POST",
        "/ports",
        &vhost("c", &pod.join("vm.sock"), r#","role":"client""#),
        201,
    );
    assert!(sees_connection(&ok, Duration::from_secs(5)), "{}", sw.log());
}

/// `field` of `/proc/<pid>/task/<tid>/status` for every thread.
fn task_field(pid: u32, field: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let Ok(s) = std::fs::read_to_string(t.join("status")) else {
            continue;
        };
        let name = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
        let val = s
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .unwrap_or_default()
            .trim()
            .to_owned();
        v.push((name.trim().to_owned(), val));
    }
    v
}

#[test]
#[ignore = "needs root: run scripts/test.sh"]
fn state_files_are_0600_and_the_switch_is_confined() {
    let run = RunDir::new("paths-state");
    let mut sw = SwitchProc::start(&run, "", &[]);
    sw.call(
        "POST",
        "/ports",
        r#"{"name":"vm1","kind":"vhost-user"}"#,
        201,
    );
    let md = std::fs::metadata(sw.state.join("ports.json")).unwrap();
    assert_eq!(md.mode() & 0o777, 0o600, "ports.json");
    let pid = sw.pid();
    const DAC_OVERRIDE: u64 = 1 << 1;
    for field in ["CapEff:", "CapPrm:", "CapBnd:"] {
        for (t, v) in task_field(pid, field) {
            let caps = u64::from_str_radix(&v, 16).unwrap();
            assert_eq!(caps & DAC_OVERRIDE, 0, "{t}: {field} {v}");
        }
    }
    let seccomp = task_field(pid, "Seccomp:");
    assert!(
        seccomp.iter().any(|(t, _)| t.starts_with("vhu-ctl-vm1")),
        "the port's control thread is listed: {seccomp:?}"
    );
    assert!(
        seccomp.iter().any(|(t, _)| t.contains("pmd")),
        "{seccomp:?}"
    );
    for (t, v) in &seccomp {
        assert_eq!(v, "2", "{t}: Seccomp");
    }
    for (t, v) in task_field(pid, "Seccomp_filters:") {
        assert_eq!(v, "1", "{t}: Seccomp_filters");
    }
    sw.stop();
    let run = RunDir::new("paths-nofilter");
    let sw = SwitchProc::start(&run, "", &["--seccomp", "off"]);
    for (t, v) in task_field(sw.pid(), "Seccomp:") {
        assert_eq!(v, "0", "{t}: Seccomp with --seccomp off");
    }
}

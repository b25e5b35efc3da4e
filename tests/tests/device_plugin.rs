// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! End-to-end test of `vhu-device-plugin` (the release binary) against a
//! test kubelet: the test serves kubelet's `Registration` service on a
//! private `kubelet.sock` and calls the plugin's `DevicePlugin` service on
//! the socket it registered, as kubelet does; then `vhu-cni` (the release
//! binary) attaches to a live `vhu-switch` with the allocated `deviceID`,
//! as Multus runs it.
//!
//! * `device_plugin_against_a_test_kubelet`, one plugin process:
//!   - `Register`: version `v1beta1`, endpoint `vhu.sock`, resource
//!     `vhu.dev/vhost-user`, options (no PreStartContainer,
//!     GetPreferredAllocation available); `GetDevicePluginOptions` the same;
//!   - `ListAndWatch`: exactly 8 devices `vhu0`..`vhu7`, all Healthy, the
//!     same ids on a second stream; a file where a device's directory goes
//!     makes the stream send that device Unhealthy (and `Allocate` of it
//!     fails with FailedPrecondition), removing it sends it Healthy again;
//!   - `Allocate` of two containers (`[vhu1]`, `[vhu2, vhu3]`): the exact
//!     mounts (host `<host-dir>/vhu1` and `<host-dir>/vhu2` at
//!     `/var/run/vhu`, read-write) and environment; the directories with
//!     owner 107:107 and mode 0770, `vhu3` a link to `vhu2`; each device's
//!     device-info file (`vhu.dev-vhost-user-<id>-device.json`) with its
//!     exact JSON;
//!   - `Allocate` of an unknown id, of no device, of an id twice:
//!     InvalidArgument with the message, nothing made;
//!   - `GetPreferredAllocation`: the must-include device, then free devices
//!     (never allocated, lowest first) before allocated ones;
//!   - `vhu-cni` ADD (spec 1.1.0) with `deviceID` `vhu1` and `vhu3` (a link):
//!     the switch port's socket and the result's `socketPath` are in the
//!     device's directory, the CNI device-info file (first the plugin's,
//!     copied as Multus does) holds the in-pod socket path; ADD of a device
//!     without a directory fails (code 7) and changes nothing; DEL removes
//!     port, socket directory and device-info file, and keeps the device's
//!     directory;
//!   - kubelet restart (server stopped, every socket in its directory
//!     removed, served again): the plugin registers again and serves on a
//!     new socket;
//!   - SIGTERM: exit 0, its socket and device-info files gone.
//! * `leftovers_never_reach_the_next_pod`, one plugin process, a pod's
//!   slot directory as the pod leaves it (a pod owns what is mounted into
//!   it): a file, a subdirectory with files, a directory of mode 0500, a
//!   socket, a FIFO, symbolic links to a victim directory outside (at the
//!   top and deep down) and to a file in it, the directory's own mode
//!   changed:
//!   - `GetPreferredAllocation` offers a device whose directory holds
//!     something after the empty ones;
//!   - `Allocate` of that device for the next pod (first device): its
//!     directory is empty, owner 107:107, mode 0770;
//!   - the same leftovers in a device that becomes a container's second
//!     device: it is a link to the first one, which is empty;
//!   - that link given to a later pod as its first device: the link is
//!     replaced by an empty directory, the directory it pointed to (another
//!     pod's, with its files) is untouched;
//!   - after every step the victim directory's entries, their kinds,
//!     content, owner and mode are unchanged.
//!
//! Needs root (directories owned by uid 107) and `vhu-switch`.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tonic::Code;
use vhu_api::PortView;
use vhu_device_plugin::api::device_plugin_client::DevicePluginClient;
use vhu_device_plugin::api::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest,
    DevicePluginOptions, Empty, ListAndWatchResponse, Mount, PreferredAllocationRequest,
};
use vhu_device_plugin::{connect_unix, devinfo_file_name};
use vhu_tests::device_plugin::{run_cni, wait_until, PluginProc, TestKubelet};
use vhu_tests::process::RunDir;
use vhu_tests::switch::SwitchProc;

const RESOURCE: &str = "vhu.dev/vhost-user";
const SLOTS: usize = 8;
const IN_POD: &str = "/var/run/vhu";

type Client = DevicePluginClient<tonic::transport::Channel>;
type Stream = tonic::Streaming<ListAndWatchResponse>;

/// `(id, health)` of a device list.
fn health(r: &ListAndWatchResponse) -> Vec<(String, String)> {
    r.devices
        .iter()
        .map(|d| (d.id.clone(), d.health.clone()))
        .collect()
}

/// The expected list: every device healthy but `sick`.
fn want(sick: &[&str]) -> Vec<(String, String)> {
    (0..SLOTS)
        .map(|i| {
            let id = format!("vhu{i}");
            let h = if sick.contains(&id.as_str()) {
                "Unhealthy"
            } else {
                "Healthy"
            };
            (id, h.to_owned())
        })
        .collect()
}

fn next(rt: &tokio::runtime::Runtime, s: &mut Stream) -> ListAndWatchResponse {
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), s.message()).await })
        .expect("a ListAndWatch message within 10 s")
        .expect("ListAndWatch stream")
        .expect("ListAndWatch ended")
}

fn allocate(
    rt: &tokio::runtime::Runtime,
    c: &mut Client,
    containers: &[&[&str]],
) -> Result<vhu_device_plugin::api::AllocateResponse, tonic::Status> {
    let req = AllocateRequest {
        container_requests: containers
            .iter()
            .map(|ids| ContainerAllocateRequest {
                devices_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
            })
            .collect(),
    };
    rt.block_on(c.allocate(req))
        .map(tonic::Response::into_inner)
}

fn preferred(
    rt: &tokio::runtime::Runtime,
    c: &mut Client,
    available: &[&str],
    must: &[&str],
    size: i32,
) -> Vec<String> {
    let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
    let req = PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: own(available),
            must_include_device_i_ds: own(must),
            allocation_size: size,
        }],
    };
    let r = rt
        .block_on(c.get_preferred_allocation(req))
        .expect("GetPreferredAllocation")
        .into_inner();
    assert_eq!(r.container_responses.len(), 1);
    r.container_responses[0].device_i_ds.clone()
}

/// Every path under `d`, sorted, with its kind.
fn tree(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let t = e.file_type().unwrap();
            out.push(format!(
                "{} {}",
                e.path().display(),
                if t.is_symlink() {
                    "link"
                } else if t.is_dir() {
                    "dir"
                } else {
                    "file"
                }
            ));
            if t.is_dir() {
                out.extend(tree(&e.path()));
            }
        }
    }
    out.sort();
    out
}

fn port_names(sw: &SwitchProc) -> Vec<String> {
    let ports: Vec<PortView> = sw.get("/ports");
    ports.into_iter().map(|p| p.spec.name).collect()
}

#[test]
#[ignore = "needs root and vhu-switch; run with --include-ignored"]
fn device_plugin_against_a_test_kubelet() {
    let run = RunDir::new("devplug");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // gRPC channels are made on this thread: in the runtime's context.
    let _in_rt = rt.enter();
    let kdir = run.join("device-plugins");
    let host = run.join("dp");
    let devinfo = run.join("devinfo/dp");
    let mut kubelet = TestKubelet::start(&rt, &kdir);
    let args: Vec<String> = [
        "--resource",
        RESOURCE,
        "--slots",
        "8",
        "--kubelet-dir",
        kdir.to_str().unwrap(),
        "--host-dir",
        host.to_str().unwrap(),
        "--devinfo-dir",
        devinfo.to_str().unwrap(),
        "--dir-owner",
        "107",
        "--dir-group",
        "107",
        "--dir-mode",
        "0770",
        "--health-interval-ms",
        "100",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut plugin = PluginProc::start(&args, &run.join("plugin.log"));

    // Registration.
    let reg = kubelet.next_register(&rt, Duration::from_secs(20));
    assert_eq!(reg.version, "v1beta1");
    assert_eq!(reg.endpoint, "vhu.sock");
    assert_eq!(reg.resource_name, RESOURCE);
    let opts = DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    };
    assert_eq!(reg.options, Some(opts));
    let sock = kdir.join("vhu.sock");
    let mut c = DevicePluginClient::new(connect_unix(&sock));
    let o = rt
        .block_on(c.get_device_plugin_options(Empty {}))
        .expect("GetDevicePluginOptions")
        .into_inner();
    assert_eq!(o, opts);

    // ListAndWatch: N healthy devices with stable ids.
    let mut watch = rt
        .block_on(c.list_and_watch(Empty {}))
        .expect("ListAndWatch")
        .into_inner();
    assert_eq!(health(&next(&rt, &mut watch)), want(&[]));
    let mut second = rt
        .block_on(c.list_and_watch(Empty {}))
        .unwrap()
        .into_inner();
    assert_eq!(health(&next(&rt, &mut second)), want(&[]));
    drop(second);

    // Bad allocations: InvalidArgument, nothing made.
    for (containers, msg) in [
        (&[&["nope"][..]][..], "unknown device ID \"nope\": this plugin's devices of vhu.dev/vhost-user are vhu0 to vhu7"),
        (&[&["vhu1", "vhu8"][..]][..], "unknown device ID \"vhu8\""),
        (&[&[][..]][..], "a container request names no device"),
        (&[&["vhu1"][..], &["vhu1"][..]][..], "device ID \"vhu1\" is requested twice"),
        (&[][..], "the AllocateRequest has no container request"),
    ] {
        let e = allocate(&rt, &mut c, containers).expect_err(msg);
        assert_eq!(e.code(), Code::InvalidArgument, "{containers:?}: {e}");
        assert!(e.message().starts_with(msg), "{containers:?}: {e}");
        assert!(tree(&host).is_empty() && tree(&devinfo).is_empty(), "{containers:?}");
    }

    // Preferred allocation before any allocation: must-include, then lowest.
    let all: Vec<String> = (0..SLOTS).map(|i| format!("vhu{i}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert_eq!(
        preferred(&rt, &mut c, &all, &["vhu5"], 3),
        ["vhu5", "vhu0", "vhu1"]
    );

    // Allocate two containers.
    let r = allocate(&rt, &mut c, &[&["vhu1"], &["vhu2", "vhu3"]]).expect("Allocate");
    assert_eq!(r.container_responses.len(), 2);
    for (resp, primary, ids) in [
        (&r.container_responses[0], "vhu1", "vhu1"),
        (&r.container_responses[1], "vhu2", "vhu2,vhu3"),
    ] {
        assert_eq!(
            resp.mounts,
            [Mount {
                container_path: IN_POD.into(),
                host_path: host.join(primary).to_str().unwrap().into(),
                read_only: false,
            }]
        );
        let env: HashMap<String, String> = [("VHU_SOCKET_DIR", IN_POD), ("VHU_DEVICE_IDS", ids)]
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        assert_eq!(resp.envs, env);
        assert!(
            resp.devices.is_empty() && resp.annotations.is_empty() && resp.cdi_devices.is_empty()
        );
        let m = std::fs::metadata(host.join(primary)).unwrap();
        assert!(m.is_dir());
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (107, 107, 0o770),
            "{primary}"
        );
    }
    assert_eq!(
        std::fs::read_link(host.join("vhu3")).unwrap(),
        Path::new("vhu2")
    );
    let dp_info = json!({"type": "vhost-user", "version": "1.1.0",
                         "vhost-user": {"mode": "client", "path": IN_POD}});
    let mut files = Vec::new();
    for id in ["vhu1", "vhu2", "vhu3"] {
        let f = devinfo.join(devinfo_file_name(RESOURCE, id));
        assert_eq!(
            f.file_name().unwrap().to_str().unwrap(),
            format!("vhu.dev-vhost-user-{id}-device.json")
        );
        let v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        assert_eq!(v, dp_info, "{id}");
        files.push(f);
    }
    assert_eq!(tree(&devinfo).len(), 3, "{:?}", tree(&devinfo));

    // Preferred: free (never allocated) devices first, the allocated last.
    assert_eq!(
        preferred(&rt, &mut c, &["vhu1", "vhu2", "vhu4", "vhu6"], &[], 3),
        ["vhu4", "vhu6", "vhu1"]
    );

    // ListAndWatch update: a device whose directory cannot be made.
    std::fs::write(host.join("vhu7"), b"not a directory").unwrap();
    assert_eq!(health(&next(&rt, &mut watch)), want(&["vhu7"]));
    let e = allocate(&rt, &mut c, &[&["vhu7"]]).unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("device vhu7 is unhealthy"), "{e}");
    std::fs::remove_file(host.join("vhu7")).unwrap();
    assert_eq!(health(&next(&rt, &mut watch)), want(&[]));

    // vhu-cni with the allocated devices, against a live switch.
    {
        // No CAP_DAC_OVERRIDE in the switch: it reaches the slots (107:107,
        // 0770) as a member of group 107, as the DaemonSet runs it.
        let sw = SwitchProc::start_with(
            &run,
            "",
            &[],
            &vhu_tests::switch::SwitchOpts {
                wrap: vec!["setpriv".into(), "--groups=107".into()],
                ..Default::default()
            },
        );
        let conf = |id: &str, ifname: &str| {
            json!({
                "cniVersion": "1.1.0", "name": "dpnet", "type": "vhu-cni",
                "kind": "vhost-user",
                // As Multus injects it: both keys.
                "deviceID": id, "pciBusID": id,
                "socketOwner": "107", "socketGroup": "107", "socketMode": "0660",
                "capabilities": {"CNIDeviceInfoFile": true},
                "runtimeConfig": {"CNIDeviceInfoFile":
                    run.join(&format!("devinfo/cni/dpnet-pod1_{ifname}"))},
            })
        };
        // The node's configuration: this switch, state directory, the
        // plugin's host directory and the device-info directory.
        let node = vhu_tests::cni_node::write(
            run.path(),
            &vhu_tests::cni_node::NodePaths {
                control_socket: Some(sw.control.clone()),
                state_dir: Some(run.join("cni-state")),
                device_dir: Some(host.clone()),
                device_info_dir: Some(run.join("devinfo")),
                ..Default::default()
            },
            "[default]\nsocket_owners = [\"107\"]\nsocket_groups = [\"107\"]\nsocket_mode = \"0660\"\n",
        );
        let node = node.display().to_string();
        let env = |cmd: &'static str, ifname: &'static str| {
            [
                ("VHU_CNI_CONFIG", node.as_str()),
                ("CNI_COMMAND", cmd),
                ("CNI_CONTAINERID", "pod1"),
                ("CNI_NETNS", "/var/run/netns/cni-devplug"),
                ("CNI_IFNAME", ifname),
                (
                    "CNI_ARGS",
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_UID=uid-1",
                ),
                ("CNI_PATH", "/usr/lib/cni"),
            ]
        };
        let cni_file = |ifname: &str| run.join(&format!("devinfo/cni/dpnet-pod1_{ifname}"));
        std::fs::create_dir_all(run.join("devinfo/cni")).unwrap();

        // A device with no directory: code 7, nothing changed.
        let before = (port_names(&sw), tree(&host));
        let o = run_cni(&env("ADD", "net1"), &conf("vhu5", "net1"));
        assert!(!o.ok, "{}", o.stdout);
        assert_eq!(o.json["code"], 7, "{}", o.stdout);
        let msg = o.json["msg"].as_str().unwrap();
        assert!(
            msg.contains(&format!(
                "deviceID \"vhu5\" has no socket directory {}",
                host.join("vhu5").display()
            )),
            "{msg}"
        );
        assert_eq!((port_names(&sw), tree(&host)), before);

        for (id, ifname) in [("vhu1", "net1"), ("vhu3", "net2")] {
            // Multus copies the device plugin's file first.
            std::fs::copy(
                devinfo.join(devinfo_file_name(RESOURCE, id)),
                cni_file(ifname),
            )
            .unwrap();
            let o = run_cni(&env("ADD", ifname), &conf(id, ifname));
            assert!(o.ok, "ADD {id}: {}", o.stdout);
            let sock = host.join(id).join(ifname).join("sock");
            assert_eq!(
                o.json["interfaces"][0]["socketPath"],
                sock.to_str().unwrap(),
                "{}",
                o.stdout
            );
            let ports: Vec<PortView> = sw.get("/ports");
            let p = ports
                .iter()
                .find(|p| p.spec.socket.as_deref() == sock.to_str())
                .unwrap_or_else(|| panic!("no port on {sock:?}: {ports:?}"));
            assert_eq!(p.spec.role, Some(vhu_api::Role::Client));
            let d = std::fs::metadata(sock.parent().unwrap()).unwrap();
            assert_eq!((d.uid(), d.gid(), d.mode() & 0o777), (107, 107, 0o770));
            let v: Value =
                serde_json::from_slice(&std::fs::read(cni_file(ifname)).unwrap()).unwrap();
            assert_eq!(
                v,
                json!({"type": "vhost-user", "version": "1.1.0",
                       "vhost-user": {"mode": "client", "path": format!("{IN_POD}/{ifname}/sock")}})
            );
        }
        // vhu3 is vhu2's container: both sockets are under vhu2's mount.
        assert!(host.join("vhu2/net2").is_dir());
        assert_eq!(port_names(&sw).len(), 2);

        for (id, ifname) in [("vhu1", "net1"), ("vhu3", "net2")] {
            let o = run_cni(&env("DEL", ifname), &conf(id, ifname));
            assert!(o.ok && o.stdout.is_empty(), "DEL {id}: {}", o.stdout);
            assert!(!host.join(id).join(ifname).exists());
            assert!(host.join(id).is_dir(), "the device's directory stays");
            assert!(!cni_file(ifname).exists());
        }
        assert!(port_names(&sw).is_empty());
    }

    // Kubelet restarts: it removes every socket; the plugin registers again.
    kubelet.restart_wipe(&rt);
    assert!(!sock.exists());
    drop(watch);
    let mut kubelet = TestKubelet::start(&rt, &kdir);
    let again = kubelet.next_register(&rt, Duration::from_secs(20));
    assert_eq!(again, reg);
    assert!(sock.exists(), "the plugin serves again");
    let mut c = DevicePluginClient::new(connect_unix(&sock));
    let mut watch = rt
        .block_on(c.list_and_watch(Empty {}))
        .unwrap()
        .into_inner();
    assert_eq!(health(&next(&rt, &mut watch)), want(&[]));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!kubelet.pending(), "registered once per kubelet start");

    // SIGTERM: stops, removes its socket and its device-info files.
    let st = plugin.stop();
    assert!(st.success(), "{st}\n{}", plugin.log());
    wait_until(Duration::from_secs(1), "the plugin socket removed", || {
        !sock.exists()
    });
    for f in &files {
        assert!(!f.exists(), "{f:?} left behind");
    }
    assert!(
        host.join("vhu1").is_dir(),
        "socket directories stay for running pods"
    );
}

/// The plugin's flags for `slots` devices under `run`, owner and group 107.
fn plugin_args(run: &RunDir, slots: u32) -> Vec<String> {
    let path = |p: &str| run.join(p).to_str().unwrap().to_owned();
    [
        "--resource".into(),
        RESOURCE.into(),
        "--slots".into(),
        slots.to_string(),
        "--kubelet-dir".into(),
        path("device-plugins"),
        "--host-dir".into(),
        path("dp"),
        "--devinfo-dir".into(),
        path("devinfo/dp"),
        "--dir-owner".into(),
        "107".into(),
        "--dir-group".into(),
        "107".into(),
        "--dir-mode".into(),
        "0770".into(),
    ]
    .to_vec()
}

/// Every entry under `d` (not following links): kind, owner, mode, and a
/// file's content or a link's target.
fn snapshot(d: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let m = std::fs::symlink_metadata(d).unwrap();
    out.insert(
        PathBuf::from("."),
        format!("dir {}:{} {:o}", m.uid(), m.gid(), m.mode()),
    );
    let mut todo = vec![d.to_owned()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                todo.push(p.clone());
                "dir".to_owned()
            } else {
                format!("file {:?}", std::fs::read(&p).unwrap())
            };
            let rel = p.strip_prefix(d).unwrap().to_owned();
            out.insert(
                rel,
                format!("{what} {}:{} {:o}", m.uid(), m.gid(), m.mode()),
            );
        }
    }
    out
}

/// What a pod may leave in its slot directory `slot` (it owns it), with
/// links to `victim` outside.
fn leave_leftovers(slot: &Path, victim: &Path) {
    std::fs::write(slot.join("note"), b"left for the next pod").unwrap();
    std::fs::create_dir_all(slot.join("sub/deeper")).unwrap();
    std::fs::write(slot.join("sub/a"), b"a").unwrap();
    std::fs::write(slot.join("sub/deeper/b"), b"b").unwrap();
    symlink(victim, slot.join("victim")).unwrap();
    symlink(victim, slot.join("sub/deeper/victim")).unwrap();
    symlink(victim.join("secret"), slot.join("secret")).unwrap();
    std::os::unix::net::UnixListener::bind(slot.join("net9.sock")).unwrap();
    let fifo = slot.join("fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    std::fs::create_dir(slot.join("locked")).unwrap();
    std::fs::write(slot.join("locked/x"), b"x").unwrap();
    std::fs::set_permissions(slot.join("locked"), std::fs::Permissions::from_mode(0o500)).unwrap();
    std::fs::set_permissions(slot, std::fs::Permissions::from_mode(0o1777)).unwrap();
}

/// Asserts `slot` is an empty directory with the plugin's owner and mode.
fn assert_fresh(slot: &Path) {
    let m = std::fs::symlink_metadata(slot).unwrap();
    assert!(m.is_dir(), "{slot:?}");
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (107, 107, 0o770),
        "{slot:?}"
    );
    assert_eq!(tree(slot), Vec::<String>::new(), "{slot:?} is not empty");
}

#[test]
#[ignore = "needs root; run with --include-ignored"]
fn leftovers_never_reach_the_next_pod() {
    let run = RunDir::new("devplug-leftovers");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    let kdir = run.join("device-plugins");
    let host = run.join("dp");
    let mut kubelet = TestKubelet::start(&rt, &kdir);
    let mut plugin = PluginProc::start(&plugin_args(&run, 4), &run.join("plugin.log"));
    kubelet.next_register(&rt, Duration::from_secs(20));
    let mut c = DevicePluginClient::new(connect_unix(&kdir.join("vhu.sock")));

    // The victim: somewhere a pod must not reach through the plugin.
    let victim = run.join("victim");
    std::fs::create_dir_all(victim.join("d")).unwrap();
    std::fs::write(victim.join("secret"), b"victim's").unwrap();
    std::fs::write(victim.join("d/e"), b"e").unwrap();
    std::fs::set_permissions(
        victim.join("secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o750)).unwrap();
    let before = snapshot(&victim);
    assert_eq!(before.len(), 4, "{before:?}");

    // A pod gets vhu0 and leaves everything it can there.
    allocate(&rt, &mut c, &[&["vhu0"]]).expect("Allocate vhu0");
    assert_fresh(&host.join("vhu0"));
    leave_leftovers(&host.join("vhu0"), &victim);
    // Once it is gone, kubelet offers vhu0 again: after the empty ones.
    assert_eq!(preferred(&rt, &mut c, &["vhu0", "vhu1"], &[], 1), ["vhu1"]);

    // The next pod gets vhu0 (its first device): empty, nothing followed.
    allocate(&rt, &mut c, &[&["vhu0"]]).expect("Allocate vhu0 again");
    assert_fresh(&host.join("vhu0"));
    assert_eq!(snapshot(&victim), before, "the victim changed");

    // The same leftovers in a device that becomes a second device.
    leave_leftovers(&host.join("vhu0"), &victim);
    allocate(&rt, &mut c, &[&["vhu2", "vhu0"]]).expect("Allocate vhu2, vhu0");
    assert_eq!(
        std::fs::read_link(host.join("vhu0")).unwrap(),
        Path::new("vhu2")
    );
    assert_fresh(&host.join("vhu2"));
    assert_eq!(snapshot(&victim), before, "the victim changed");

    // vhu2's pod lives on (a socket directory); vhu0, a link to it, goes to
    // another pod as its first device: the link is replaced, not followed.
    std::fs::create_dir(host.join("vhu2/net1")).unwrap();
    std::fs::write(host.join("vhu2/net1/sock"), b"").unwrap();
    let live = tree(&host.join("vhu2"));
    allocate(&rt, &mut c, &[&["vhu0"]]).expect("Allocate vhu0 as a first device");
    assert_fresh(&host.join("vhu0"));
    assert_eq!(
        tree(&host.join("vhu2")),
        live,
        "another pod's directory changed"
    );
    assert_eq!(snapshot(&victim), before, "the victim changed");

    let st = plugin.stop();
    assert!(st.success(), "{st}\n{}", plugin.log());
}

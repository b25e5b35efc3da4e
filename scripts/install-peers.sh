#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#
# Installs every peer vhu's end-to-end tests use, on Debian bookworm, as root:
#
#   * Debian packages: dpdk-dev (dpdk-testpmd), busybox-static, cpio, iproute2,
#     kmod, procps (kill), tcpdump (reads the switch's captures), prometheus (promtool checks
#     the switch's metrics), socat (bridges the control socket to loopback TCP),
#     python3-venv, containernetworking-plugins (the reference CNI IPAM plugin
#     host-local, in /usr/lib/cni, for vhu-cni's tests);
#   * schemathesis (PyPI, pinned) in a virtualenv under the peers directory
#     (${VHU_PEERS_DIR:-/var/cache/vhu-peers}/venv/bin/st): fuzzes the switch's
#     control API from its OpenAPI document; and kubernetes-validate (PyPI,
#     pinned) in the same virtualenv, for deploy/'s manifests;
#   * QEMU >= 10 (qemu-system-x86) from bookworm-backports: bookworm's QEMU 7.2
#     segfaults when a TCG guest starts a vhost-user net device;
#   * the Debian cloud guest kernel, unpacked into the peers directory
#     (${VHU_PEERS_DIR:-/var/cache/vhu-peers});
#   * the guest initramfs (scripts/mk-initramfs.sh);
#   * 2 MiB hugepages (scripts/hugepages.sh);
#   * Open vSwitch with DPDK (openvswitch-switch-dpdk), the switch benchmark's
#     reference (benches/vs-switches.sh); installed without starting its
#     daemons, which the benchmark runs on private databases;
#   * container runtimes for vhu-cni's tests: containerd (its CRI plugin),
#     runc, podman (CNI backend), catatonit, iptables, without starting their
#     daemons; grpcio-tools (PyPI, pinned) in the same virtualenv, for the
#     tests' CRI client.
#   * libvirt 11 (libvirtd, virtlogd, virsh) from bookworm-backports, for the
#     KubeVirt binding's tests; installed without starting its daemons.
#
# Only the package registries are needed. Every step is skipped when already
# done, so a second run takes a few seconds and touches no network. Exits
# non-zero on the first failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peers_dir=${VHU_PEERS_DIR:-/var/cache/vhu-peers}
export VHU_PEERS_DIR=$peers_dir
export DEBIAN_FRONTEND=noninteractive

# Packages from bookworm itself.
base_packages=(dpdk-dev busybox-static cpio iproute2 kmod procps tcpdump prometheus socat python3-venv containernetworking-plugins)
# Suite that carries QEMU 10, and the first QEMU major that works with TCG
# guests and vhost-user.
backports=bookworm-backports
qemu_min_major=10
backports_list=/etc/apt/sources.list.d/vhu-bookworm-backports.sources
debian_sources=/etc/apt/sources.list.d/debian.sources

log() { printf 'install-peers: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

[[ $(id -u) -eq 0 ]] || die "must run as root"
command -v apt-get >/dev/null || die "apt-get not found: this script targets Debian bookworm"

# Wait for other apt/dpkg users instead of failing at once.
apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)

apt_updated=0
# Runs `apt-get update` at most once per invocation.
apt_update_once() {
	((apt_updated)) && return 0
	log "apt-get update"
	apt-get "${apt_opts[@]}" -qq update || die "apt-get update failed"
	apt_updated=1
}

# apt-get install ARGS... with no daemon started by the packages: a
# policy-rc.d answering 101 stops invoke-rc.d for the install (an existing
# policy is left alone).
install_without_daemons() {
	local policy=/usr/sbin/policy-rc.d own=0 rc=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\n# vhu install-peers.sh: no daemon starts while it installs.\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		own=1
		trap "rm -f '$policy'" EXIT
	fi
	log "apt-get install $* (daemons not started)"
	apt-get "${apt_opts[@]}" install -y -q "$@" || rc=$?
	if ((own)); then
		rm -f "$policy"
		trap - EXIT
	fi
	return "$rc"
}

# True when every named package is installed.
installed() {
	local p status
	for p in "$@"; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) || return 1
		[[ $status == installed ]] || return 1
	done
}

# Prints the major version of the QEMU x86_64 system emulator, or nothing.
qemu_major() {
	local out
	out=$(qemu-system-x86_64 --version 2>/dev/null | head -n1) || return 0
	# "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-...)"
	[[ $out =~ version\ ([0-9]+)\. ]] && printf '%s\n' "${BASH_REMATCH[1]}"
	return 0
}

# Prints "URI<TAB>Signed-By" of the Debian mirror serving plain bookworm,
# taken from debian.sources (deb822) or, failing that, from sources.list.
debian_mirror() {
	if [[ -r $debian_sources ]]; then
		awk '
			BEGIN { RS = ""; FS = "\n" }
			{
				uri = ""; suites = ""; signed = ""; types = ""
				for (i = 1; i <= NF; i++) {
					line = $i
					if (line ~ /^[ \t]*#/) continue
					if (line ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", line); split(line, u, /[ \t]+/); uri = u[1] }
					else if (line ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", line); suites = " " line " " }
					else if (line ~ /^Signed-By:/) { sub(/^Signed-By:[ \t]*/, "", line); signed = line }
					else if (line ~ /^Types:/) { types = " " line " " }
				}
				if (uri != "" && types ~ / deb / && suites ~ /[ \t]bookworm[ \t]/) {
					printf "%s\t%s\n", uri, signed
					exit
				}
			}' "$debian_sources"
	fi
	if [[ -r /etc/apt/sources.list ]]; then
		awk '$1 == "deb" && $3 == "bookworm" { printf "%s\t\n", $2; exit }' /etc/apt/sources.list
	fi
}

# Adds bookworm-backports (component main) of the bookworm mirror to apt's
# sources, unless it is already there.
ensure_backports_source() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		if grep -Eq "^[^#]*[[:space:]]$backports([[:space:]]|$)" "$f"; then
			log "$backports already in apt sources ($f)"
			return 0
		fi
	done
	local mirror uri signed
	mirror=$(debian_mirror | head -n1)
	uri=${mirror%%$'\t'*}
	signed=${mirror#*$'\t'}
	[[ -n $uri ]] || die "found no 'bookworm' suite in $debian_sources or /etc/apt/sources.list"
	log "adding $backports (main) of $uri to $backports_list"
	{
		echo "# Written by vhu scripts/install-peers.sh: QEMU >= $qemu_min_major for the guest tests."
		echo "Types: deb"
		echo "URIs: $uri"
		echo "Suites: $backports"
		echo "Components: main"
		[[ -n $signed ]] && echo "Signed-By: $signed"
	} >"$backports_list"
}

start=$SECONDS

# QEMU's suite goes into apt's sources before the first `apt-get update`, so
# that one update serves every step.
major=$(qemu_major)
qemu_ok=0
if [[ -n $major ]] && ((major >= qemu_min_major)); then
	qemu_ok=1
else
	ensure_backports_source
fi

# ---- 1. Debian packages ----------------------------------------------------
if installed "${base_packages[@]}"; then
	log "packages already installed: ${base_packages[*]}"
else
	apt_update_once
	log "apt-get install ${base_packages[*]}"
	apt-get "${apt_opts[@]}" install -y -q "${base_packages[@]}" || die "apt-get install failed"
fi

# ---- 2. QEMU >= 10 from backports ------------------------------------------
if ((qemu_ok)); then
	log "QEMU $major already installed: $(command -v qemu-system-x86_64)"
else
	log "QEMU >= $qemu_min_major needed (found: ${major:-none}); installing from $backports"
	apt_update_once
	apt-get "${apt_opts[@]}" install -y -q --no-install-recommends -t "$backports" qemu-system-x86 ||
		die "apt-get install -t $backports qemu-system-x86 failed"
	hash -r
	major=$(qemu_major)
	if [[ -z $major ]] || ((major < qemu_min_major)); then
		die "qemu-system-x86_64 is version '${major:-none}' after install, want >= $qemu_min_major"
	fi
	log "installed $(qemu-system-x86_64 --version | head -n1) at $(command -v qemu-system-x86_64)"
fi

# ---- 3. Guest kernel ------------------------------------------------------
mkdir -p "$peers_dir"
kernel_dir=$peers_dir/kernel
if [[ -e $peers_dir/vmlinuz && -s $kernel_dir/.package ]]; then
	log "guest kernel already unpacked: $(<"$kernel_dir/.package") in $kernel_dir"
else
	# The meta package's dependency names the current ABI, e.g.
	# linux-image-6.1.0-37-cloud-amd64. Ask for it by exact name: a glob
	# would download every version in the archive.
	find_kernel_pkg() {
		apt-cache depends linux-image-cloud-amd64 2>/dev/null |
			awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9.]+-[0-9]+-cloud-amd64$/ { print $2; exit }'
	}
	pkg=$(find_kernel_pkg || true)
	if [[ -z $pkg ]]; then
		apt_update_once
		pkg=$(find_kernel_pkg || true)
	fi
	[[ -n $pkg ]] || die "apt-cache depends linux-image-cloud-amd64 names no linux-image-*-cloud-amd64"
	log "downloading $pkg"
	dl=$(mktemp -d "$peers_dir/.download.XXXXXX")
	trap 'rm -rf "$dl"' EXIT
	# apt drops privileges to _apt for downloads: let it write there.
	if id _apt >/dev/null 2>&1; then chown _apt "$dl"; fi
	(cd "$dl" && apt-get "${apt_opts[@]}" download -q "$pkg") || die "apt-get download $pkg failed"
	deb=$(find "$dl" -maxdepth 1 -name '*.deb' -print -quit)
	[[ -n $deb ]] || die "apt-get download $pkg left no .deb"
	log "unpacking $(basename "$deb")"
	rm -rf "$kernel_dir.new"
	dpkg-deb -x "$deb" "$kernel_dir.new" || die "dpkg-deb -x $deb failed"
	vmlinuz=$(find "$kernel_dir.new/boot" -maxdepth 1 -name 'vmlinuz-*' -print -quit)
	[[ -n $vmlinuz ]] || die "$pkg has no boot/vmlinuz-*"
	echo "$pkg" >"$kernel_dir.new/.package"
	rm -rf "$kernel_dir"
	mv "$kernel_dir.new" "$kernel_dir"
	ln -sfn "kernel/boot/$(basename "$vmlinuz")" "$peers_dir/vmlinuz"
	rm -rf "$dl"
	trap - EXIT
	log "guest kernel: $peers_dir/vmlinuz -> kernel/boot/$(basename "$vmlinuz")"
fi

# ---- 3b. schemathesis (PyPI) in a virtualenv ------------------------------
# Debian's python3 (not whatever python3 is first on PATH) builds the venv;
# the version is pinned, and a venv that already has it is left alone.
schemathesis_version=4.32.5
venv_dir=$peers_dir/venv
st_version() {
	"$venv_dir/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null || true
}
if [[ -x $venv_dir/bin/st && $(st_version) == "$schemathesis_version" ]]; then
	log "schemathesis $schemathesis_version already installed: $venv_dir/bin/st"
else
	log "installing schemathesis $schemathesis_version into $venv_dir"
	[[ -x $venv_dir/bin/python ]] || /usr/bin/python3 -m venv "$venv_dir" || die "python3 -m venv $venv_dir failed"
	"$venv_dir/bin/python" -m pip install -q "schemathesis==$schemathesis_version" ||
		die "pip install schemathesis==$schemathesis_version failed"
	[[ $(st_version) == "$schemathesis_version" ]] || die "schemathesis is '$(st_version)' after install, want $schemathesis_version"
fi

# ---- 3c. kubernetes-validate (PyPI) in the same virtualenv -----------------
# Validates deploy/'s manifests against the Kubernetes schemas it ships
# (tests/tests/deploy.rs); pinned, left alone when already there.
kv_pin=1.37.0
kv_version() {
	"$venv_dir/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null || true
}
if [[ $(kv_version) != "$kv_pin" || ! -x $venv_dir/bin/kubernetes-validate ]]; then
	log "installing kubernetes-validate $kv_pin into $venv_dir"
	[[ -x $venv_dir/bin/python ]] || /usr/bin/python3 -m venv "$venv_dir" || die "python3 -m venv $venv_dir failed"
	"$venv_dir/bin/python" -m pip install -q "kubernetes-validate==$kv_pin" || die "pip install kubernetes-validate==$kv_pin failed"
	[[ $(kv_version) == "$kv_pin" ]] || die "kubernetes-validate is '$(kv_version)' after install, want $kv_pin"
fi
log "kubernetes-validate $kv_pin: $venv_dir/bin/kubernetes-validate"

# ---- 4. Guest initramfs ---------------------------------------------------
"$here/mk-initramfs.sh" || die "scripts/mk-initramfs.sh failed"

# ---- 5. Hugepages ---------------------------------------------------------
"$here/hugepages.sh" || die "scripts/hugepages.sh failed"

# ---- 6. Open vSwitch with DPDK ---------------------------------------------
# Debian's openvswitch-switch starts ovsdb-server and ovs-vswitchd from its
# postinst (invoke-rc.d), which must not happen here: the benchmark runs its
# own ovs-vswitchd-dpdk on a private database, and the machine may have no
# init system at all. A policy-rc.d answering 101 ("action forbidden") keeps
# invoke-rc.d from starting anything; an existing one is left alone.
ovs_packages=(openvswitch-switch-dpdk)
ovs_vswitchd_dpdk=/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk
if installed "${ovs_packages[@]}" && [[ -x $ovs_vswitchd_dpdk ]]; then
	log "Open vSwitch with DPDK already installed: $ovs_vswitchd_dpdk"
else
	apt_update_once
	install_without_daemons "${ovs_packages[@]}" || die "apt-get install ${ovs_packages[*]} failed"
	[[ -x $ovs_vswitchd_dpdk ]] || die "$ovs_vswitchd_dpdk missing after installing ${ovs_packages[*]}"
fi

# ---- 7. Container runtimes for vhu-cni (containerd's CRI, podman) ----------
# containerd 1.6 (its CRI plugin is the kubelet's path) and podman 4.3 with
# its CNI backend run pods whose network is vhu-cni (tests/tests/cni_runtimes.rs).
# Neither daemon is started by the packages (a policy-rc.d answering 101, as
# for OVS): the tests start containerd by hand on a private config, and give
# podman a private CONTAINERS_CONF, root and runroot. grpcio-tools (PyPI,
# pinned) in the peers' venv compiles the vendored CRI api.proto into the
# Python CRI client's stubs (it ships its own protoc).
runtime_packages=(containerd runc podman catatonit iptables)
grpc_tools_version=1.85.1
if installed "${runtime_packages[@]}"; then
	log "container runtimes already installed: ${runtime_packages[*]}"
else
	apt_update_once
	install_without_daemons --no-install-recommends "${runtime_packages[@]}" ||
		die "apt-get install ${runtime_packages[*]} failed"
fi
grpc_version() {
	"$venv_dir/bin/python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true
}
if [[ $(grpc_version) == "$grpc_tools_version" ]]; then
	log "grpcio-tools $grpc_tools_version already installed in $venv_dir"
else
	log "installing grpcio-tools $grpc_tools_version (and grpcio) into $venv_dir"
	"$venv_dir/bin/python" -m pip install -q "grpcio-tools==$grpc_tools_version" "grpcio==$grpc_tools_version" ||
		die "pip install grpcio-tools==$grpc_tools_version failed"
	[[ $(grpc_version) == "$grpc_tools_version" ]] || die "grpcio-tools is '$(grpc_version)' after install, want $grpc_tools_version"
fi

# ---- 8. libvirt from bookworm-backports ------------------------------------
# The KubeVirt binding's tests define their domains through libvirt, as
# KubeVirt does. libvirt 11 from backports drives the backports QEMU 10
# (bookworm's 9.0 is untested with it). Each package is named with its suite
# rather than `-t bookworm-backports`, which would also upgrade systemd and
# more. The daemons are not started here: the tests start `virtlogd -d` and
# `libvirtd -d` themselves (there may be no init system).
libvirt_packages=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt0 libvirt-common libvirt-daemon-common libvirt-daemon-log)
libvirt_min_major=11
libvirt_major() {
	local v
	v=$(libvirtd --version 2>/dev/null | awk '{ print $NF }') || true
	printf '%s\n' "${v%%.*}"
}
if installed "${libvirt_packages[@]}" && (($(libvirt_major || true) + 0 >= libvirt_min_major)); then
	log "libvirt already installed: $(libvirtd --version)"
else
	if ! grep -Eqs "^[^#]*[[:space:]]$backports([[:space:]]|$)" /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
		ensure_backports_source
		apt_updated=0
	fi
	apt_update_once
	log "apt-get install ${libvirt_packages[*]} (from $backports)"
	apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${libvirt_packages[@]/%//$backports}" ||
		die "apt-get install of libvirt from $backports failed"
	hash -r
	(($(libvirt_major) + 0 >= libvirt_min_major)) || die "libvirtd is '$(libvirtd --version)' after install, want >= $libvirt_min_major"
fi

log "all peers ready in $((SECONDS - start)) s:"
log "  qemu:      $(command -v qemu-system-x86_64) ($(qemu-system-x86_64 --version | head -n1))"
log "  testpmd:   $(command -v dpdk-testpmd)"
log "  kernel:    $peers_dir/vmlinuz ($(<"$kernel_dir/.package"))"
log "  initramfs: $peers_dir/initramfs.gz"
log "  st:        $venv_dir/bin/st (schemathesis $(st_version))"
log "  kubernetes-validate: $venv_dir/bin/kubernetes-validate ($(kv_version))"
log "  hugepages: $(</proc/sys/vm/nr_hugepages) x 2 MiB"
log "  ovs-dpdk:  $ovs_vswitchd_dpdk ($("$ovs_vswitchd_dpdk" --version | head -n1))"
log "  runtimes:  $(containerd --version) / $(podman --version) / grpcio-tools $(grpc_version)"
log "  libvirt:   $(command -v libvirtd) ($(libvirtd --version))"

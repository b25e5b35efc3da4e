#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#
# Builds the test guest's initramfs, $VHU_PEERS_DIR/initramfs.gz, from:
#   * /bin/busybox from busybox-static (every applet is linked at boot);
#   * the virtio-net modules of the guest kernel unpacked by install-peers.sh
#     into $VHU_PEERS_DIR/kernel, decompressed here if they ship as .ko.xz or
#     .ko.zst so that the guest's plain `insmod` can load them;
#   * scripts/guest-init.sh as /init.
#
# The modules are listed in load order in /etc/vhu-modules. A copy of the
# guest-init.sh that went in is kept as $VHU_PEERS_DIR/guest-init.sh so that
# the test harness can tell a stale initramfs from a current one.
#
# Skipped when the inputs (this script, guest-init.sh, busybox, the kernel
# package) are unchanged since the last build; VHU_FORCE_INITRAMFS=1 forces it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peers_dir=${VHU_PEERS_DIR:-/var/cache/vhu-peers}
kernel_dir=$peers_dir/kernel
out=$peers_dir/initramfs.gz
stamp=$peers_dir/initramfs.inputs
init_src=$here/guest-init.sh
busybox=/bin/busybox

# virtio-net and what it needs, in load order. Any that the kernel has built
# in (modules.builtin) is skipped.
modules=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net)

log() { printf 'mk-initramfs: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

[[ -s $kernel_dir/.package ]] || die "no guest kernel in $kernel_dir: run scripts/install-peers.sh"
[[ -r $init_src ]] || die "missing $init_src"
[[ -x $busybox ]] || die "$busybox is missing: run scripts/install-peers.sh (busybox-static)"
# ldd fails on a static binary; the dynamic `busybox` package would not run in
# an initramfs without its libraries.
if ldd "$busybox" >/dev/null 2>&1; then
	die "$busybox is dynamically linked: apt-get install busybox-static"
fi
command -v cpio >/dev/null || die "cpio not found: apt-get install cpio"

kver=$(find "$kernel_dir/lib/modules" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | head -n1)
[[ -n $kver ]] || die "no lib/modules/<version> in $kernel_dir"
moddir=$kernel_dir/lib/modules/$kver

inputs=$(
	sha256sum "$0" "$init_src" "$busybox" "$kernel_dir/.package" | awk '{ print $1 }'
	echo "$kver"
)
if [[ -z ${VHU_FORCE_INITRAMFS:-} && -s $out && -r $stamp && $(<"$stamp") == "$inputs" ]]; then
	log "$out is up to date"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,etc,lib/modules,run}
cp "$busybox" "$root/bin/busybox"
install -m 0755 "$init_src" "$root/init"
# The kernel opens /dev/console for /init before anything is mounted.
if [[ $(id -u) -eq 0 ]]; then
	mknod -m 600 "$root/dev/console" c 5 1
	mknod -m 666 "$root/dev/null" c 1 3
fi

decompress() { # FILE.ko.{xz,zst} DEST.ko
	case $1 in
	*.ko.xz)
		if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else "$busybox" xz -dc "$1" >"$2"; fi
		;;
	*.ko.zst) zstd -dcq "$1" >"$2" ;;
	*.ko.gz) gzip -dc "$1" >"$2" ;;
	*.ko) cp "$1" "$2" ;;
	*) die "unknown module format: $1" ;;
	esac
}

: >"$root/etc/vhu-modules"
for m in "${modules[@]}"; do
	# Module names use '_' but files may use '-'; match either.
	pattern=${m//_/[_-]}
	src=$(find "$moddir/kernel" -regextype posix-extended -regex ".*/${pattern}\.ko(\.xz|\.zst|\.gz)?" -print -quit)
	if [[ -z $src ]]; then
		if grep -Eq "/${pattern}\.ko$" "$moddir/modules.builtin" 2>/dev/null; then
			log "$m is built into the kernel"
			continue
		fi
		die "module $m not found under $moddir/kernel"
	fi
	decompress "$src" "$root/lib/modules/$m.ko" || die "cannot decompress $src"
	echo "$m" >>"$root/etc/vhu-modules"
	log "module $m <- ${src#"$moddir/"}"
done

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --owner=0:0 --quiet) |
	gzip -9 >"$work/initramfs.gz" || die "cpio/gzip failed"
mv "$work/initramfs.gz" "$out"
cp "$init_src" "$peers_dir/guest-init.sh"
echo "$inputs" >"$stamp"
log "wrote $out ($(du -k "$out" | cut -f1) KiB, kernel $kver)"

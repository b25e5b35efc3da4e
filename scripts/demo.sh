#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#
# The product working, in one command: two Linux guests in QEMU ping each
# other through vhu-switch.
#
#   scripts/demo.sh [--defaults] [--accel auto|kvm|tcg] [--no-install] [--no-build]
#
# In order, it:
#   1. checks the guest peers (QEMU >= 10, the guest kernel, the initramfs
#      built from scripts/guest-init.sh) and installs what is missing with
#      scripts/install-peers.sh (as root; it installs every peer of the test
#      suite, a few minutes the first time) or rebuilds a stale initramfs
#      with scripts/mk-initramfs.sh;
#   2. builds vhu-switch and vhuctl (cargo build --release -p vhu-switch
#      --bins; a no-op when they are current);
#   3. starts vhu-switch (adaptive polling, the default) on a private control
#      socket, socket directory and state directory in a temporary directory,
#      and adds two vhost-user ports with two queue pairs each, vm1 and vm2,
#      with vhuctl;
#   4. boots two guests (256 MiB of shared memfd memory, one CPU, virtio-net
#      with two queue pairs on the switch's sockets; 10.0.0.1 and 10.0.0.2),
#      printing each QEMU command line;
#   5. captures vm1's frames (vhuctl capture) while vm1 pings vm2 and vm2
#      pings vm1, and prints the guests' ping output;
#   6. prints each guest's eth0 counters beside its switch port's, at a quiet
#      moment, then `vhuctl stats` and the captured frames (tcpdump -r, when
#      tcpdump is installed);
#   7. powers the guests off, stops the switch and removes everything it made.
#
# Everything it started is stopped on exit, on error and on Ctrl-C: the QEMU
# processes, the capture, the switch (which removes its sockets), and the
# temporary directory. It exits 0 when every ping was answered and every
# guest's counters equal its port's, 1 otherwise, 2 when a prerequisite is
# missing, 130 on Ctrl-C.
#
# Options:
#   --defaults      use the switch on its embedded defaults (control socket
#                   /run/vhu/vhu.sock): the one already running there (the
#                   README's main command), or one started on them; the ports
#                   are then demo-vm1 and demo-vm2, removed at the end, and
#                   the directories a switch it started created are removed
#   --accel A       kvm, tcg, or auto (default): KVM when /dev/kvm is usable
#                   and this machine is not itself a virtual machine (nested
#                   KVM guests can hang), TCG otherwise
#   --no-install    fail with a message instead of installing missing peers
#   --no-build      use the binaries already built instead of running cargo
#
# Environment: VHU_PEERS_DIR (kernel and initramfs, default
# /var/cache/vhu-peers), VHU_QEMU (the QEMU binary), CARGO_TARGET_DIR,
# VHU_SWITCH_BIN and VHUCTL_BIN (the binaries), VHU_DEMO_BOOT_SECS (how long
# the guests may take to boot, default 300).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
peers_dir=${VHU_PEERS_DIR:-/var/cache/vhu-peers}
boot_secs=${VHU_DEMO_BOOT_SECS:-300}
# One guest command (a few pings) and a guest's power-off.
cmd_secs=60
pings=4
qemu_min_major=10

defaults=0
accel=auto
install=1
build=1

usage() {
	sed -n '/^#   scripts\/demo.sh/p' "${BASH_SOURCE[0]}" | sed 's/^#   /usage: /'
	echo "See the header of scripts/demo.sh for what it does."
}

while (($#)); do
	case $1 in
	--defaults) defaults=1 ;;
	--accel)
		[[ ${2:-} =~ ^(auto|kvm|tcg)$ ]] || {
			usage >&2
			exit 64
		}
		accel=$2
		shift
		;;
	--accel=*)
		accel=${1#--accel=}
		[[ $accel =~ ^(auto|kvm|tcg)$ ]] || {
			usage >&2
			exit 64
		}
		;;
	--no-install) install=0 ;;
	--no-build) build=0 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		usage >&2
		exit 64
		;;
	esac
	shift
done

say() { printf 'demo: %s\n' "$*"; }
# A missing prerequisite: exit 2 with what to do.
missing() {
	printf 'demo: missing prerequisite: %s\n' "$*" >&2
	exit 2
}
fail() {
	printf 'demo: FAILED: %s\n' "$*" >&2
	exit 1
}
section() { printf '\n==> %s\n' "$*"; }

# ---- cleanup: everything this script starts is registered here ----------------
run=""
switch_pid=""
switch_started=0
capture_pid=""
declare -a qemu_pid=() console_fd=()
declare -a added_ports=()
# Directories a switch started on the defaults created (they did not exist).
declare -a created_dirs=()
ctl_socket=""
vhuctl=""

# True while PID runs (a zombie, not yet reaped, counts as gone).
alive() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	[[ ${s:0:1} != Z ]]
}

# Sleeps for the next step of an adaptive back-off: 50 ms, doubling up to
# 500 ms; `backoff_reset` starts over.
backoff_ms=50
backoff_reset() { backoff_ms=50; }
backoff() {
	sleep "$((backoff_ms / 1000)).$(printf '%03d' $((backoff_ms % 1000)))"
	((backoff_ms = backoff_ms * 2 > 500 ? 500 : backoff_ms * 2)) || true
}

# Waits up to SECS for PID to exit; true if it did.
wait_exit() {
	local pid=$1 secs=$2 start=$SECONDS
	backoff_reset
	while alive "$pid"; do
		((SECONDS - start < secs)) || return 1
		backoff
	done
}

# Stops PID: SIGTERM, then SIGKILL after SECS; reaps it.
stop_pid() {
	local pid=$1 secs=$2
	[[ -n $pid ]] || return 0
	if alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		if ! wait_exit "$pid" "$secs"; then
			say "$3 did not stop within ${secs} s: killing it"
			kill -KILL "$pid" 2>/dev/null || true
			wait_exit "$pid" 5 || true
		fi
	fi
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT
	# A second Ctrl-C must not cut the clean-up short.
	trap '' INT TERM
	set +e
	if ((rc == 130)); then
		printf '\ndemo: interrupted: cleaning up\n' >&2
	fi
	stop_pid "$capture_pid" 5 "vhuctl capture"
	local i
	for i in "${!qemu_pid[@]}"; do
		stop_pid "${qemu_pid[$i]}" 10 "QEMU (vm$i)"
	done
	local fd
	for fd in "${console_fd[@]}"; do
		exec {fd}>&-
	done
	# Ports added to a switch that keeps running, or whose state persists
	# (--defaults), are removed; a private switch takes its ports with it.
	if ((defaults || !switch_started)) && [[ -n $vhuctl ]]; then
		for p in "${added_ports[@]}"; do
			"$vhuctl" --socket "$ctl_socket" port del "$p" >/dev/null 2>&1 ||
				say "could not remove port $p from the switch at $ctl_socket"
		done
	fi
	if ((switch_started)); then
		stop_pid "$switch_pid" 15 "vhu-switch"
	fi
	local d
	for d in "${created_dirs[@]}"; do
		rm -f "$d/ports.json"
		rmdir "$d" 2>/dev/null
	done
	[[ -n $run ]] && rm -rf "$run"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$SECONDS

# ---- 1. guest peers -------------------------------------------------------------
section "guest peers (QEMU >= $qemu_min_major, guest kernel, initramfs in $peers_dir)"

find_qemu() {
	if [[ -n ${VHU_QEMU:-} ]]; then
		echo "$VHU_QEMU"
	elif [[ -x /usr/bin/qemu-system-x86_64 ]]; then
		echo /usr/bin/qemu-system-x86_64
	else
		command -v qemu-system-x86_64 || true
	fi
}
qemu_major() {
	local out
	out=$("$1" --version 2>/dev/null | head -n1) || return 0
	[[ $out =~ version\ ([0-9]+)\. ]] && echo "${BASH_REMATCH[1]}"
	return 0
}
# What is missing for the guests, one item a line.
peers_missing() {
	local q major
	q=$(find_qemu)
	major=""
	[[ -n $q ]] && major=$(qemu_major "$q")
	if [[ -z $major ]] || ((major < qemu_min_major)); then
		echo "QEMU >= $qemu_min_major (found: ${q:-none}${major:+, version $major})"
	fi
	[[ -e $peers_dir/vmlinuz ]] || echo "the guest kernel $peers_dir/vmlinuz"
	if [[ ! -x /bin/busybox ]] || ! command -v cpio >/dev/null; then
		echo "busybox-static and cpio (to build the initramfs)"
	fi
}

mapfile -t need < <(peers_missing)
if ((${#need[@]})); then
	for n in "${need[@]}"; do say "missing: $n"; done
	if ((!install)); then
		missing "run: sudo scripts/install-peers.sh (or scripts/demo.sh without --no-install, as root)"
	fi
	if [[ $(id -u) != 0 ]]; then
		missing "installing them needs root: sudo scripts/install-peers.sh, or run this script as root"
	fi
	say "installing with scripts/install-peers.sh (the test suite's peers: QEMU 10 from"
	say "bookworm-backports, the guest kernel, DPDK, ...; several minutes the first time)"
	VHU_PEERS_DIR=$peers_dir "$root/scripts/install-peers.sh" ||
		missing "scripts/install-peers.sh failed (see above)"
	mapfile -t need < <(peers_missing)
	((${#need[@]} == 0)) || missing "still missing after scripts/install-peers.sh: ${need[*]}"
fi
qemu=$(find_qemu)
say "QEMU: $qemu ($("$qemu" --version | head -n1))"
say "kernel: $peers_dir/vmlinuz -> $(readlink "$peers_dir/vmlinuz" || echo "$peers_dir/vmlinuz")"

# The initramfs is current when it was built from this checkout's
# guest-init.sh (mk-initramfs.sh keeps a copy of the one it packed).
if [[ -s $peers_dir/initramfs.gz ]] && cmp -s "$peers_dir/guest-init.sh" "$root/scripts/guest-init.sh"; then
	say "initramfs: $peers_dir/initramfs.gz (current)"
else
	if [[ ! -w $peers_dir ]]; then
		missing "$peers_dir/initramfs.gz is missing or stale and $peers_dir is not writable: sudo scripts/mk-initramfs.sh"
	fi
	say "building the guest initramfs (scripts/mk-initramfs.sh, a few seconds)"
	VHU_PEERS_DIR=$peers_dir "$root/scripts/mk-initramfs.sh" || missing "scripts/mk-initramfs.sh failed (see above)"
fi

# ---- 2. binaries ----------------------------------------------------------------
section "vhu-switch and vhuctl"
bin_dir=${CARGO_TARGET_DIR:-$root/target}/release
switch_bin=${VHU_SWITCH_BIN:-$bin_dir/vhu-switch}
vhuctl_bin=${VHUCTL_BIN:-$bin_dir/vhuctl}
if ((build)) && [[ -z ${VHU_SWITCH_BIN:-}${VHUCTL_BIN:-} ]]; then
	command -v cargo >/dev/null || missing "cargo (https://rustup.rs), or --no-build with built binaries"
	say "cargo build --release -p vhu-switch --bins (the first build takes several minutes)"
	(cd "$root" && cargo build --release -p vhu-switch --bins) || fail "cargo build failed"
fi
for b in "$switch_bin" "$vhuctl_bin"; do
	[[ -x $b ]] || missing "$b: build it with cargo build --release -p vhu-switch --bins"
done
vhuctl=$vhuctl_bin
say "using $switch_bin and $vhuctl"

# ---- 3. the switch and its ports ------------------------------------------------
run=$(mktemp -d "${TMPDIR:-/tmp}/vhu-demo.XXXXXX")
section "vhu-switch"
ctl() { "$vhuctl" --socket "$ctl_socket" "$@"; }
if ((defaults)); then
	ctl_socket=/run/vhu/vhu.sock
	ports=(demo-vm1 demo-vm2)
	switch_args=()
else
	ctl_socket=$run/vhu.sock
	ports=(vm1 vm2)
	switch_args=(--control-socket "$ctl_socket" --socket-dir "$run/sockets" --state-dir "$run/state")
fi
if ((defaults)) && ctl port list >/dev/null 2>&1; then
	say "using the switch already running on $ctl_socket"
else
	if ((defaults)); then
		for d in /run/vhu/sockets /run/vhu /var/lib/vhu; do
			[[ -e $d ]] || created_dirs+=("$d")
		done
	fi
	say "starting: vhu-switch --poll adaptive ${switch_args[*]}"
	# In a session of its own, so that a Ctrl-C in this terminal reaches this
	# script only: the clean-up then removes the ports before it stops the
	# switch (a switch stopped first would keep them in its state file).
	setsid "$switch_bin" --poll adaptive "${switch_args[@]}" >"$run/switch.log" 2>&1 &
	switch_pid=$!
	switch_started=1
	t0=$SECONDS
	backoff_reset
	until ctl port list >/dev/null 2>&1; do
		alive "$switch_pid" || {
			cat "$run/switch.log" >&2
			fail "vhu-switch exited at start (its log is above)"
		}
		((SECONDS - t0 < 30)) || fail "vhu-switch not ready after 30 s: $(tail -n 5 "$run/switch.log")"
		backoff
	done
	say "ready (pid $switch_pid, log in $run/switch.log)"
fi
for p in "${ports[@]}"; do
	if ctl port show "$p" >/dev/null 2>&1; then
		fail "the switch at $ctl_socket already has a port $p: remove it (vhuctl port del $p) or run without --defaults"
	fi
done
for p in "${ports[@]}"; do
	echo "\$ vhuctl port add $p --kind vhost-user --queues 2"
	ctl port add "$p" --kind vhost-user --queues 2
	added_ports+=("$p")
done
# The socket each port listens on: the last column of `vhuctl port list`.
declare -a sock=()
for i in 1 2; do
	sock[i]=$(ctl port list | awk -v p="${ports[i - 1]}" '$1 == p { print $NF }')
	[[ -S ${sock[i]} ]] || fail "port ${ports[i - 1]}: no socket at '${sock[i]}'"
done

# ---- 4. two guests ---------------------------------------------------------------
section "two guests"
kvm_usable() { [[ -r /dev/kvm && -w /dev/kvm ]]; }
case $accel in
auto)
	if kvm_usable && ! grep -qw hypervisor /proc/cpuinfo; then
		accel=kvm
		say "accelerator: KVM (/dev/kvm is usable)"
	else
		accel=tcg
		if kvm_usable; then
			why="this machine is itself a VM (nested KVM guests can hang; --accel kvm forces it)"
		else
			why="/dev/kvm is not usable"
		fi
		say "accelerator: TCG, software emulation: $why; the guests boot in 10-60 s"
	fi
	;;
kvm) kvm_usable || missing "--accel kvm: /dev/kvm is missing or not readable and writable" ;;
tcg) ;;
esac
accel_args=(-accel "$accel")
[[ $accel == kvm ]] && accel_args+=(-cpu host)

declare -a console=()
for i in 1 2; do
	console[i]=$run/vm$i.console
	mkfifo "$run/vm$i.in"
	# Read-write: opening the FIFO never blocks, and QEMU's stdin stays
	# open (the guest's console input) while this script holds it.
	exec {fd}<>"$run/vm$i.in"
	console_fd[i]=$fd
	# shellcheck disable=SC2054 # the commas are QEMU's option syntax
	args=("${accel_args[@]}" -nodefaults -no-user-config -display none -serial stdio -no-reboot
		-m 256 -smp 2
		-object memory-backend-memfd,id=mem,size=256M,share=on -numa node,memdev=mem
		-chardev "socket,id=c0,path=${sock[i]}"
		-netdev vhost-user,id=n0,chardev=c0,queues=2
		-device "virtio-net-pci,netdev=n0,mac=52:54:00:00:00:0$i,mq=on,vectors=6"
		-kernel "$peers_dir/vmlinuz" -initrd "$peers_dir/initramfs.gz"
		-append "console=ttyS0 quiet panic=-1 vhu.test=agent vhu.ip=10.0.0.$i/24 vhu.ipv6=0")
	printf 'vm%s: %s' "$i" "$qemu"
	printf " %q" "${args[@]}"
	echo
	"$qemu" "${args[@]}" <"$run/vm$i.in" >"${console[i]}" 2>"$run/vm$i.err" &
	qemu_pid[i]=$!
done

# The console without the serial line's carriage returns.
console_of() { tr -d '\r' <"${console[$1]}"; }
# Dies with guest I's console and QEMU's messages when its QEMU is gone.
check_guest() {
	alive "${qemu_pid[$1]}" && return 0
	echo "--- vm$1 console ---" >&2
	console_of "$1" | tail -n 30 >&2
	echo "--- vm$1 QEMU stderr ---" >&2
	cat "$run/vm$1.err" >&2
	fail "QEMU of vm$1 exited"
}

# Boot progress: a dot every 2 s, the guests' own status lines as they come.
say "booting (a dot every 2 s)"
declare -a shown=(0 0 0) ready=(0 0 0)
dots=0
# Prints a status line, ending a line of dots first.
status() {
	((dots)) && echo
	dots=0
	echo "  $*"
}
t0=$SECONDS
last_dot=$SECONDS
backoff_reset
while ((!ready[1] || !ready[2])); do
	for i in 1 2; do
		((ready[i])) && continue
		check_guest "$i"
		mapfile -t lines < <(console_of "$i" | grep '^VHU-RESULT ' || true)
		for ((n = shown[i]; n < ${#lines[@]}; n++)); do
			case ${lines[n]} in
			*features=* | *agent=ready*) ;;
			*) status "vm$i: ${lines[n]#VHU-RESULT }" ;;
			esac
		done
		shown[i]=${#lines[@]}
		if [[ " ${lines[*]} " == *" VHU-RESULT agent=ready "* ]]; then
			ready[i]=1
			status "vm$i: up after $((SECONDS - t0)) s"
			backoff_reset
		fi
	done
	((ready[1] && ready[2])) && break
	if ((SECONDS - t0 >= boot_secs)); then
		((dots)) && echo
		for i in 1 2; do
			echo "--- vm$i console ---" >&2
			console_of "$i" | tail -n 20 >&2
		done
		fail "the guests did not boot within $boot_secs s (VHU_DEMO_BOOT_SECS)"
	fi
	if ((SECONDS - last_dot >= 2)); then
		printf '.'
		dots=1
		last_dot=$SECONDS
	fi
	backoff
done

# Runs one shell command line in guest I's console agent (scripts/guest-init.sh,
# vhu.test=agent) and prints its output; returns its exit status.
declare -a next_id=(0 1 1)
guest() {
	local i=$1 cmd=$2 id t0
	id=${next_id[i]}
	next_id[i]=$((id + 1))
	printf 'VHU-CMD %s %s\n' "$id" "$cmd" >&"${console_fd[i]}"
	t0=$SECONDS
	backoff_reset
	until console_of "$i" | grep -q "^VHU-END $id rc="; do
		check_guest "$i"
		((SECONDS - t0 < cmd_secs)) || fail "vm$i: no answer to '$cmd' within $cmd_secs s"
		backoff
	done
	console_of "$i" | awk -v b="VHU-BEGIN $id" -v e="VHU-END $id rc=" '
		done { next }
		index($0, e) == 1 { rc = substr($0, length(e) + 1) + 0; done = 1; next }
		on { print }
		$0 == b { on = 1 }
		END { exit rc }'
}

# ---- 5. pings, with a capture on vm1 ----------------------------------------------
section "vm1 (10.0.0.1) and vm2 (10.0.0.2) ping each other through the switch"
capture_file=$run/${ports[0]}.pcapng
# ARP request and reply, then each way the requests and their replies.
capture_frames=$((4 * pings + 2))
echo "\$ vhuctl capture ${ports[0]} -c $capture_frames -s 60 -w ${ports[0]}.pcapng &"
ctl capture "${ports[0]}" -c "$capture_frames" -s 60 -w "$capture_file" 2>"$run/capture.err" &
capture_pid=$!
# The stream starts with its pcapng header once the switch is capturing.
t0=$SECONDS
backoff_reset
until [[ -s $capture_file ]]; do
	alive "$capture_pid" || fail "vhuctl capture exited: $(cat "$run/capture.err")"
	((SECONDS - t0 < 10)) || fail "vhuctl capture wrote nothing within 10 s"
	backoff
done

lost=0
for pair in "1 2" "2 1"; do
	read -r a b <<<"$pair"
	echo "vm$a\$ ping -c $pings -i 0.5 10.0.0.$b"
	guest "$a" "ping -c $pings -i 0.5 -W 5 10.0.0.$b 2>&1" >"$run/ping.out" || true
	sed 's/^/  /' "$run/ping.out"
	grep -q "$pings packets transmitted, $pings packets received" "$run/ping.out" || lost=1
done

# ---- 6. counters, side by side --------------------------------------------------
section "counters: each guest's eth0 and its switch port (tx: sent by the guest, rx: delivered to it)"
# shellcheck disable=SC2016 # expanded in the guest
counter_cmd='for c in tx_packets tx_bytes rx_packets rx_bytes tx_dropped rx_dropped; do echo "$c=$(cat /sys/class/net/eth0/statistics/$c)"; done'
# The switch's counters of a port from `vhuctl stats`: tx_packets tx_bytes
# rx_packets rx_bytes tx_dropped rx_dropped.
port_counters() {
	ctl stats | awk -v p="$1" '$1 == p { print $5, $6, $2, $3, $7, $4 }'
}
# The guests' and the ports' counters at a moment the switch's stand
# still across the reading of the guests' (the guests send nothing
# unprompted: static addresses, IPv6 off).
declare -a gc=() sc=()
for _ in 1 2 3 4 5; do
	before="$(port_counters "${ports[0]}") $(port_counters "${ports[1]}")"
	for i in 1 2; do
		guest "$i" "$counter_cmd" >"$run/counters.out" || fail "vm$i: reading eth0's counters failed"
		gc[i]=$(awk -F= '{ printf "%s ", $2 }' "$run/counters.out")
	done
	for i in 1 2; do sc[i]=$(port_counters "${ports[i - 1]}"); done
	[[ $before == "${sc[1]} ${sc[2]}" ]] && break
	sleep 0.5
done
printf '%-18s %14s %14s %14s %14s\n' "" "vm1 eth0" "port ${ports[0]}" "vm2 eth0" "port ${ports[1]}"
names=("tx frames" "tx bytes" "rx frames" "rx bytes" "tx dropped" "rx dropped")
read -ra g1 <<<"${gc[1]}"
read -ra s1 <<<"${sc[1]}"
read -ra g2 <<<"${gc[2]}"
read -ra s2 <<<"${sc[2]}"
agree=1
for k in 0 1 2 3 4 5; do
	printf '%-18s %14s %14s %14s %14s\n' "${names[k]}" "${g1[k]:-?}" "${s1[k]:-?}" "${g2[k]:-?}" "${s2[k]:-?}"
	if ((k < 4)) && [[ ${g1[k]:-x} != "${s1[k]:-y}" || ${g2[k]:-x} != "${s2[k]:-y}" ]]; then
		agree=0
	fi
	if ((k >= 4)) && [[ ${s1[k]:-x} != 0 || ${s2[k]:-x} != 0 ]]; then
		agree=0
	fi
done
echo
echo "\$ vhuctl stats"
ctl stats
echo "\$ vhuctl stats ${ports[0]}    # per queue pair"
ctl stats "${ports[0]}"

# ---- the captured frames -----------------------------------------------------------
section "frames captured on ${ports[0]}"
if ! wait_exit "$capture_pid" 10; then
	kill -TERM "$capture_pid" 2>/dev/null || true
fi
wait "$capture_pid" 2>/dev/null || true
capture_pid=""
if command -v tcpdump >/dev/null; then
	echo "\$ tcpdump -nn -e -r ${ports[0]}.pcapng | head -n 6"
	tcpdump -nn -e -r "$capture_file" 2>/dev/null >"$run/frames.txt" || true
	head -n 6 "$run/frames.txt" | sed 's/^/  /'
	echo "  ($(wc -l <"$run/frames.txt") frames captured in all)"
else
	say "$(wc -c <"$capture_file") bytes of pcapng; install tcpdump to read them (vhuctl capture ${ports[0]} | tcpdump -r -)"
fi

# ---- 7. the end -------------------------------------------------------------------
section "shutting down"
for i in 1 2; do
	printf 'VHU-CMD %s quit\n' "${next_id[i]}" >&"${console_fd[i]}"
done
for i in 1 2; do
	if wait_exit "${qemu_pid[i]}" "$cmd_secs"; then
		wait "${qemu_pid[i]}" 2>/dev/null || true
		say "vm$i powered off"
	fi
done

echo
if ((lost)); then
	fail "some pings were not answered (after $((SECONDS - start)) s)"
fi
if ((!agree)); then
	fail "a guest's counters differ from its port's, or the switch dropped frames (after $((SECONDS - start)) s)"
fi
say "OK: every ping answered both ways, each guest's counters equal its port's ($((SECONDS - start)) s)"

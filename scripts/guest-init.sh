#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
# shellcheck shell=dash disable=SC2013
#
# /init of vhu's test guest (packed by scripts/mk-initramfs.sh).
#
# Loads the virtio-net modules, brings eth0 up, runs the test chosen on the
# kernel command line, prints machine-readable results to the console and
# powers off. Parameters (kernel command line, read from /proc/cmdline):
#
#   vhu.test=info|ping|net|agent  test to run (default info)
#   vhu.ip=10.0.0.2/24   guest address on eth0
#   vhu.peer=10.0.0.1    address pinged; given a static ARP entry
#   vhu.peer_mac=52:54:00:00:00:01
#   vhu.count=1000       ping: frames sent per CPU
#   vhu.size=1000        ping: ICMP payload bytes
#   vhu.cpus=N           ping: send from CPUs 0..N-1 in turn, each pinned with
#                        taskset (default: every online CPU). virtio-net maps
#                        CPU i to TX queue i, so this spreads traffic over the
#                        queue pairs.
#   vhu.settle=1         seconds to wait after traffic before reading counters
#
#   vhu.test=net         exchanges with a real kernel stack at vhu.peer (no
#                        static ARP entry: the peer must answer ARP):
#                        ICMP echo, a UDP file exchange (TFTP), and TCP
#                        streams both ways, each checked end to end
#   vhu.pings=5          net: echo requests, every one must be answered
#                        (vhu.size bytes of payload with a fixed pattern)
#   vhu.tftp_port=0      net: the peer's TFTP server (0: skip); the guest
#                        gets vhu-get.bin and puts vhu.tftp_kib KiB of random
#                        data as vhu-put.bin
#   vhu.tftp_kib=256
#   vhu.tx_port=0        net: the peer's TCP sink (0: skip); the guest sends
#                        vhu.tx_mib MiB of random data (written to tmpfs
#                        first) and reads back the sink's "sha256 bytes" line
#   vhu.tx_mib=64
#   vhu.rx_port=0        net: the guest listens here and stores what the
#                        peer sends until it closes (0: skip)
#   vhu.timeout=300      net: limit of each transfer, in seconds
#
#   vhu.test=agent       runs what the host writes on the console (QEMU's
#                        stdin), one command a line, for tests with several
#                        phases: the host writes "VHU-CMD <id> <shell command>",
#                        the guest prints "VHU-BEGIN <id>", the command's
#                        output and "VHU-END <id> rc=<exit status>". Commands
#                        run with stdin from /dev/null, in the agent's shell:
#                        variables and background jobs (`cmd &`, later `wait`)
#                        persist from one to the next. "VHU-CMD <id> quit"
#                        ends the loop (then counters, done, power off).
#                        "VHU-RESULT agent=ready" tells the host to begin.
#   vhu.ipv6=1           0: IPv6 off on every interface before eth0 comes up
#                        (no router solicitations or MLD reports: the guest
#                        then sends only what its tests make it send)
#
# Output: lines "VHU-RESULT key=value ..." (values never contain spaces):
#   cpus=N  features=<0/1 string>  queues=N  carrier=0|1
#   ping_cpuI_sent=N ping_cpuI_received=N  sent=N received=N
#        ip_in_hdr_errors=N icmp_in_csum_errors=N
#   net: ping_sent=N ping_received=N peer_mac=MAC
#        tftp_get_bytes=N tftp_get_sha256=HEX tftp_put_bytes=N tftp_put_sha256=HEX
#        tcp_tx_bytes=N tcp_tx_sha256=HEX tcp_tx_peer_sha256=HEX tcp_tx_peer_bytes=N tcp_tx_ms=N
#        tcp_rx_bytes=N tcp_rx_sha256=HEX tcp_rx_ms=N  (and *_ms timings)
#   rx_packets=N tx_packets=N rx_bytes=N tx_bytes=N rx_errors=N rx_dropped=N ...
#   done            (last line on success)
#   error=<what>    (on failure, instead of done)
# For vhu.test=ping the peer is expected to reflect frames, not to answer
# pings: the guest answers its own reflected requests (see test_ping), so
# `received` counts the requests that came back with valid checksums.

/bin/busybox --install -s /bin
export PATH=/bin:/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1

result() { echo "VHU-RESULT $*"; }

# Prints an error result and powers off; never returns.
fail() {
	result "error=$1"
	shutdown_now
}

shutdown_now() {
	sync
	poweroff -f
	# poweroff -f should not return; if it does, make the kernel panic so
	# QEMU (-no-reboot, panic=-1) exits rather than hang.
	sleep 5
	echo o >/proc/sysrq-trigger
	exit 1
}

# ---- parameters --------------------------------------------------------------
VHU_test=info
VHU_ip=10.0.0.2/24
VHU_peer=10.0.0.1
VHU_peer_mac=52:54:00:00:00:01
VHU_count=1000
VHU_size=1000
VHU_cpus=
VHU_settle=1
VHU_pings=5
VHU_tftp_port=0
VHU_tftp_kib=256
VHU_tx_port=0
VHU_tx_mib=64
VHU_rx_port=0
VHU_timeout=300
VHU_ipv6=1
set -f # no globbing of command-line words
for arg in $(cat /proc/cmdline); do
	case $arg in
	vhu.*=*)
		key=${arg%%=*}
		key=${key#vhu.}
		# shellcheck disable=SC2034 # read by the eval below
		val=${arg#*=}
		case $key in
		*[!a-z0-9_]* | '') fail "bad-parameter-$key" ;;
		esac
		eval "VHU_$key=\$val"
		;;
	esac
done
set +f

is_number() {
	case $1 in
	'' | *[!0-9]*) return 1 ;;
	esac
	return 0
}

# ---- network device ----------------------------------------------------------
# mk-initramfs.sh decompressed the modules: busybox's insmod hands a .ko.xz
# to the kernel as is, which rejects it ("Invalid ELF header magic") while
# insmod still exits 0. Hence the check of /sys/module too.
for m in $(cat /etc/vhu-modules); do
	insmod "/lib/modules/$m.ko" || fail "insmod-$m"
	[ -d "/sys/module/$m" ] || fail "module-$m-not-loaded"
done

i=0
while [ ! -e /sys/class/net/eth0 ]; do
	i=$((i + 1))
	[ $i -gt 100 ] && fail "no-eth0"
	sleep 0.1
done

ncpus=$(nproc)
result "cpus=$ncpus"
result "features=$(cat /sys/class/net/eth0/device/features)"
result "queues=$(find /sys/class/net/eth0/queues -maxdepth 1 -name 'rx-*' | wc -l)"
result "mac=$(cat /sys/class/net/eth0/address) mtu=$(cat /sys/class/net/eth0/mtu)"

if [ "$VHU_ipv6" = 0 ]; then
	for c in all default; do
		echo 1 >/proc/sys/net/ipv6/conf/$c/disable_ipv6 || fail "ipv6-off"
	done
fi
ip link set lo up
ip link set eth0 up || fail "link-up"
ip addr add "$VHU_ip" dev eth0 || fail "addr-add"

# The link is up once the backend has started the device
# (VIRTIO_NET_S_LINK_UP); the kernel drops what eth0 sends before that.
i=0
while [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" != 1 ]; do
	i=$((i + 1))
	[ $i -gt 100 ] && break
	sleep 0.1
done
result "carrier=$(cat /sys/class/net/eth0/carrier 2>/dev/null)"

print_counters() {
	s=/sys/class/net/eth0/statistics
	line=
	for c in rx_packets tx_packets rx_bytes tx_bytes rx_errors tx_errors rx_dropped tx_dropped rx_missed_errors rx_over_errors rx_length_errors rx_crc_errors rx_frame_errors rx_fifo_errors; do
		[ -r $s/$c ] && line="$line $c=$(cat $s/$c)"
	done
	result "${line# }"
}

# ---- tests ---------------------------------------------------------------------
test_info() {
	:
}

test_ping() {
	is_number "$VHU_count" || fail "bad-count-$VHU_count"
	is_number "$VHU_size" || fail "bad-size-$VHU_size"
	cpus=${VHU_cpus:-$ncpus}
	is_number "$cpus" || fail "bad-cpus-$cpus"
	[ "$cpus" -gt "$ncpus" ] && cpus=$ncpus
	[ "$cpus" -lt 1 ] && cpus=1

	arp -s "$VHU_peer" "$VHU_peer_mac" || fail "arp"
	# The peer reflects each request as is (addresses swapped at L2 only).
	# To check what comes back, the peer's address is made local (on lo)
	# and the requests are routed out of eth0 all the same: a rule ahead of
	# the local table sends what this host sends from its own address to the
	# peer's through eth0. A reflected request then arrives on eth0 for a
	# local address: the kernel verifies its IP header and ICMP checksums
	# (the ICMP one over every payload byte), drops it if either is wrong,
	# and answers the intact ones through lo. Replies received = requests
	# that came back intact.
	own=${VHU_ip%/*}
	ip addr add "$VHU_peer/32" dev lo || fail "peer-addr"
	ip route add "$VHU_peer" dev eth0 table 100 || fail "route-table"
	ip rule add pref 10 iif lo from "$own" to "$VHU_peer" lookup 100 || fail "rule-out"
	ip rule add pref 100 lookup local || fail "rule-local"
	ip rule del pref 0 || fail "rule-del"
	for c in all eth0; do
		echo 0 >/proc/sys/net/ipv4/conf/$c/rp_filter || fail "rp-filter"
	done
	echo 1 >/proc/sys/net/ipv4/conf/eth0/accept_local || fail "accept-local"
	total=0
	received=0
	cpu=0
	while [ $cpu -lt "$cpus" ]; do
		if [ "$cpus" -gt 1 ]; then
			command -v taskset >/dev/null || fail "no-taskset"
			pin="taskset -c $cpu"
		else
			pin=
		fi
		# ping exits 1 when a reply is missing; the counts tell.
		out=$($pin ping -q -c "$VHU_count" -i 0.005 -W 1 -s "$VHU_size" -I "$own" "$VHU_peer" 2>&1)
		sent=$(echo "$out" | sed -n 's/^\([0-9][0-9]*\) packets transmitted.*/\1/p')
		got=$(echo "$out" | sed -n 's/.* \([0-9][0-9]*\) packets received.*/\1/p')
		if ! is_number "$sent" || ! is_number "$got"; then
			echo "$out"
			fail "ping-cpu$cpu"
		fi
		result "ping_cpu${cpu}_sent=$sent ping_cpu${cpu}_received=$got"
		total=$((total + sent))
		received=$((received + got))
		cpu=$((cpu + 1))
	done
	result "sent=$total received=$received"
	# What the kernel refused: IP header and ICMP checksum errors.
	result "$(awk '$1 == "Ip:" && !h { for (i = 2; i <= NF; i++) n[i] = $i; h = 1; next }
		$1 == "Ip:" { for (i = 2; i <= NF; i++) if (n[i] == "InHdrErrors") print "ip_in_hdr_errors=" $i }
		$1 == "Icmp:" && !k { for (i = 2; i <= NF; i++) m[i] = $i; k = 1; next }
		$1 == "Icmp:" { for (i = 2; i <= NF; i++) if (m[i] == "InCsumErrors") print "icmp_in_csum_errors=" $i }' /proc/net/snmp | tr '\n' ' ')"
}

# Milliseconds since boot.
now_ms() {
	read -r up _ </proc/uptime
	sec=${up%.*}
	frac=${up#*.}
	frac=${frac#0}
	echo $((sec * 1000 + frac * 10))
}

# sha256 of a file (the hex digest only).
sha256_of() {
	h=$(sha256sum "$1") || return 1
	echo "${h%% *}"
}

size_of() {
	wc -c <"$1" | tr -d ' '
}

test_net() {
	for v in "$VHU_pings" "$VHU_size" "$VHU_tftp_port" "$VHU_tftp_kib" "$VHU_tx_port" \
		"$VHU_tx_mib" "$VHU_rx_port" "$VHU_timeout"; do
		is_number "$v" || fail "bad-number-$v"
	done
	to=$VHU_timeout

	# ARP and ICMP: the peer's stack must resolve and answer every request.
	out=$(ping -c "$VHU_pings" -i 0.2 -W 5 -s "$VHU_size" -p a5 "$VHU_peer" 2>&1)
	echo "$out"
	sent=$(echo "$out" | sed -n 's/^\([0-9][0-9]*\) packets transmitted.*/\1/p')
	received=$(echo "$out" | sed -n 's/.* \([0-9][0-9]*\) packets received.*/\1/p')
	is_number "$sent" || fail "ping-output"
	is_number "$received" || fail "ping-output"
	peer_mac=$(awk -v ip="$VHU_peer" '$1 == ip { print $4 }' /proc/net/arp)
	result "ping_sent=$sent ping_received=$received peer_mac=${peer_mac:-none}"
	[ "$received" = "$sent" ] || fail "ping-lost-$((sent - received))-of-$sent"

	# UDP: a file each way over TFTP (lock-step 512-byte blocks).
	if [ "$VHU_tftp_port" != 0 ]; then
		t0=$(now_ms)
		timeout "$to" tftp -g -r vhu-get.bin -l /tmp/get.bin "$VHU_peer" "$VHU_tftp_port" ||
			fail "tftp-get"
		result "tftp_get_bytes=$(size_of /tmp/get.bin) tftp_get_sha256=$(sha256_of /tmp/get.bin)" \
			"tftp_get_ms=$(($(now_ms) - t0))"
		dd if=/dev/urandom of=/tmp/put.bin bs=1024 count="$VHU_tftp_kib" 2>/dev/null ||
			fail "tftp-put-data"
		t0=$(now_ms)
		timeout "$to" tftp -p -l /tmp/put.bin -r vhu-put.bin "$VHU_peer" "$VHU_tftp_port" ||
			fail "tftp-put"
		result "tftp_put_bytes=$(size_of /tmp/put.bin) tftp_put_sha256=$(sha256_of /tmp/put.bin)" \
			"tftp_put_ms=$(($(now_ms) - t0))"
		rm -f /tmp/get.bin /tmp/put.bin
	fi

	# TCP, guest to peer: random data from tmpfs; the sink answers with
	# the sha256 and length of what it received.
	if [ "$VHU_tx_port" != 0 ]; then
		t0=$(now_ms)
		dd if=/dev/urandom of=/tmp/tx.bin bs=1048576 count="$VHU_tx_mib" 2>/dev/null ||
			fail "tcp-tx-data"
		sum=$(sha256_of /tmp/tx.bin) || fail "tcp-tx-sha256"
		result "tcp_tx_bytes=$(size_of /tmp/tx.bin) tcp_tx_sha256=$sum tcp_tx_prep_ms=$(($(now_ms) - t0))"
		t0=$(now_ms)
		reply=$(timeout "$to" nc "$VHU_peer" "$VHU_tx_port" </tmp/tx.bin) || fail "tcp-tx"
		t1=$(now_ms)
		result "tcp_tx_peer_sha256=${reply%% *} tcp_tx_peer_bytes=${reply##* }" \
			"tcp_tx_ms=$((t1 - t0))"
		rm -f /tmp/tx.bin
	fi

	# TCP, peer to guest: store the stream, then hash it.
	if [ "$VHU_rx_port" != 0 ]; then
		result "tcp_rx_listening=$VHU_rx_port"
		t0=$(now_ms)
		timeout "$to" nc -l -p "$VHU_rx_port" </dev/null >/tmp/rx.bin || fail "tcp-rx"
		t1=$(now_ms)
		result "tcp_rx_bytes=$(size_of /tmp/rx.bin) tcp_rx_sha256=$(sha256_of /tmp/rx.bin)" \
			"tcp_rx_ms=$((t1 - t0))"
		rm -f /tmp/rx.bin
	fi
}

# Reads "VHU-CMD <id> <command>" lines from the console until "quit".
test_agent() {
	stty -echo 2>/dev/null || fail "stty"
	result "agent=ready"
	while IFS= read -r line; do
		case $line in
		"VHU-CMD "*) ;;
		*) continue ;;
		esac
		rest=${line#VHU-CMD }
		id=${rest%% *}
		cmd=${rest#* }
		echo "VHU-BEGIN $id"
		[ "$cmd" = quit ] && break
		eval "$cmd" </dev/null
		echo "VHU-END $id rc=$?"
	done
	echo "VHU-END $id rc=0"
}

case $VHU_test in
info) test_info ;;
ping) test_ping ;;
net) test_net ;;
agent) test_agent ;;
*) fail "unknown-test-$VHU_test" ;;
esac

is_number "$VHU_settle" && sleep "$VHU_settle"
print_counters
result "done"
shutdown_now

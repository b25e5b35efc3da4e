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
#   vhu.test=info|ping   test to run (default info)
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
# Output: lines "VHU-RESULT key=value ..." (values never contain spaces):
#   cpus=N  features=<0/1 string>  queues=N  carrier=0|1
#   ping_cpuI_sent=N  sent=N
#   rx_packets=N tx_packets=N rx_bytes=N tx_bytes=N rx_errors=N rx_dropped=N ...
#   done            (last line on success)
#   error=<what>    (on failure, instead of done)
# The peer is expected to reflect frames, not to answer pings: ping replies
# are not needed, the guest's receive counters are what the tests check.

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
	total=0
	cpu=0
	while [ $cpu -lt "$cpus" ]; do
		if [ "$cpus" -gt 1 ]; then
			command -v taskset >/dev/null || fail "no-taskset"
			pin="taskset -c $cpu"
		else
			pin=
		fi
		# No replies come back (the peer reflects the request as is), so
		# ping exits 1; -W 1 stops it waiting 10 s for the last reply.
		out=$($pin ping -q -c "$VHU_count" -i 0.005 -W 1 -s "$VHU_size" "$VHU_peer" 2>&1)
		sent=$(echo "$out" | sed -n 's/^\([0-9][0-9]*\) packets transmitted.*/\1/p')
		if ! is_number "$sent"; then
			echo "$out"
			fail "ping-cpu$cpu"
		fi
		result "ping_cpu${cpu}_sent=$sent"
		total=$((total + sent))
		cpu=$((cpu + 1))
	done
	result "sent=$total"
}

case $VHU_test in
info) test_info ;;
ping) test_ping ;;
*) fail "unknown-test-$VHU_test" ;;
esac

is_number "$VHU_settle" && sleep "$VHU_settle"
print_counters
result "done"
shutdown_now

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
#
# Reserves 2 MiB hugepages and mounts hugetlbfs on /dev/hugepages.
#
# Idempotent: does nothing when at least VHU_HUGEPAGES (default 512, i.e.
# 1 GiB) pages are already reserved and hugetlbfs is already mounted there.
# Needs root. Exits non-zero if the kernel cannot reserve the pages.
set -euo pipefail

want=${VHU_HUGEPAGES:-512}
mnt=${VHU_HUGEPAGES_MOUNT:-/dev/hugepages}
sysctl_file=/proc/sys/vm/nr_hugepages

log() { printf 'hugepages: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

[[ $want =~ ^[0-9]+$ ]] || die "VHU_HUGEPAGES must be a number, got '$want'"
[[ -w $sysctl_file ]] || die "$sysctl_file is not writable: run as root"

have=$(<"$sysctl_file")
if ((have >= want)); then
	log "$have pages of 2 MiB already reserved (want $want)"
else
	log "reserving $want pages of 2 MiB (had $have)"
	echo "$want" >"$sysctl_file"
	have=$(<"$sysctl_file")
	if ((have < want)); then
		# Memory may be too fragmented: compact it and try once more.
		log "only $have reserved; compacting memory and retrying"
		sync
		echo 1 >/proc/sys/vm/compact_memory 2>/dev/null || true
		echo "$want" >"$sysctl_file"
		have=$(<"$sysctl_file")
	fi
	((have >= want)) || die "the kernel reserved only $have of $want hugepages"
	log "$have pages reserved"
fi

# Field 2 of /proc/mounts is the mount point, field 3 the type.
if awk -v m="$mnt" '$2 == m && $3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/mounts; then
	log "hugetlbfs already mounted on $mnt"
else
	log "mounting hugetlbfs on $mnt"
	mkdir -p "$mnt"
	mount -t hugetlbfs nodev "$mnt" || die "mount -t hugetlbfs nodev $mnt failed"
fi

#!/usr/bin/env bash
# A real process burning one CPU in a real cgroup, metered by the cgroup
# source: about 1000 millicores (±5%) and exactly DESIGN.md §2's price
# (checked by cgroup_meter). Needs root or a delegated cgroup; prefers cgroup
# v2 with the cpu controller, else v1 cpuacct (with the v1 memory hierarchy
# for the memory limit when there is one), else a v2 hierarchy without
# controllers (its cpu.stat still counts usage_usec). Exits 77 (skipped)
# only when no cgroup can be created. METER_TEST_CGROUP_MODE=v2|v1|v2core
# forces a layout.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
meter=$bin/tests/cgroup_meter
name=meter-test-root-$$
sandbox=sbx_busy
mem_limit_mib=512
seconds=3

loop_pid=
dirs=() # created cgroup directories, parents first
cleanup_cgroups() {
	if [[ -n $loop_pid ]]; then
		kill "$loop_pid" 2>/dev/null || true
		wait "$loop_pid" 2>/dev/null || true
	fi
	local i
	for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
		rmdir "${dirs[i]}" 2>/dev/null || true
	done
}
cleanup_fns+=(cleanup_cgroups)

# The first mount point of a cgroup v1 hierarchy with controller $1, or of
# cgroup2 when $1 is "unified".
mount_of() {
	local want=$1 dev mnt type opts _
	while read -r dev mnt type opts _; do
		if [[ $want == unified && $type == cgroup2 ]]; then
			echo "$mnt"
			return 0
		fi
		if [[ $type == cgroup && ",$opts," == *",$want,"* ]]; then
			echo "$mnt"
			return 0
		fi
	done </proc/self/mounts
	return 1
}

# mkcg DIR: creates a cgroup directory and remembers it for the cleanup.
mkcg() { mkdir "$1" 2>/dev/null && dirs+=("$1"); }

setup_v2() { # with the cpu controller
	local u
	u=$(mount_of unified) || return 1
	grep -qw cpu "$u/cgroup.controllers" 2>/dev/null || return 1
	echo +cpu >"$u/cgroup.subtree_control" 2>/dev/null || true
	mkcg "$u/$name" || return 1
	echo +cpu >"$u/$name/cgroup.subtree_control" 2>/dev/null || return 1
	if grep -qw memory "$u/$name/cgroup.controllers"; then
		echo +memory >"$u/$name/cgroup.subtree_control" 2>/dev/null || true
	fi
	mkcg "$u/$name/$sandbox" || return 1
	[[ -f $u/$name/$sandbox/cpu.stat ]] || return 1
	expect_mem=-1
	if [[ -f $u/$name/$sandbox/memory.max ]] &&
		echo $((mem_limit_mib * 1024 * 1024)) >"$u/$name/$sandbox/memory.max"; then
		expect_mem=$mem_limit_mib
	fi
	root=$u/$name
	procs=("$u/$name/$sandbox/cgroup.procs")
}

setup_v1() {
	local c m
	c=$(mount_of cpuacct) || return 1
	mkcg "$c/$name" || return 1
	mkcg "$c/$name/$sandbox" || return 1
	[[ -f $c/$name/$sandbox/cpuacct.usage ]] || return 1
	root=$c/$name
	procs=("$c/$name/$sandbox/cgroup.procs")
	expect_mem=-1
	# The source finds memory by replacing the cpuacct component of the path.
	m=$(dirname "$c")/memory
	if [[ $(mount_of memory) == "$m" ]] && mkcg "$m/$name" && mkcg "$m/$name/$sandbox" &&
		echo $((mem_limit_mib * 1024 * 1024)) >"$m/$name/$sandbox/memory.limit_in_bytes"; then
		expect_mem=$mem_limit_mib
		procs+=("$m/$name/$sandbox/cgroup.procs")
	fi
}

setup_v2core() { # cgroup2 without controllers: cpu.stat is still there
	local u
	u=$(mount_of unified) || return 1
	mkcg "$u/$name" || return 1
	mkcg "$u/$name/$sandbox" || return 1
	grep -q '^usage_usec ' "$u/$name/$sandbox/cpu.stat" 2>/dev/null || return 1
	root=$u/$name
	procs=("$u/$name/$sandbox/cgroup.procs")
	expect_mem=-1
}

mode=
for m in ${METER_TEST_CGROUP_MODE:-v2 v1 v2core}; do
	if [[ $m == v2 || $m == v1 || $m == v2core ]] && "setup_$m"; then
		mode=$m
		break
	fi
	cleanup_cgroups
	dirs=()
done
if [[ -z $mode ]]; then
	echo "SKIP: no writable cgroup (v2 with cpu, v1 cpuacct, or v2 cpu.stat) on this machine"
	exit 77
fi
echo "cgroup $mode: root $root, sandbox $sandbox, memory limit $expect_mem MiB"

# The busy loop must get a whole CPU even when builds run beside the test.
# nice alone is not enough where the kernel groups tasks by session
# (autogroup), so the loop also goes into a cpu cgroup with the largest
# share (v1 cpu.shares, v2 cpu.weight) when there is a cpu controller.
prioritise() {
	local c
	if [[ $mode == v2 ]]; then
		echo 10000 >"$root/cpu.weight" && echo 10000 >"$root/$sandbox/cpu.weight"
		return 0
	fi
	c=$(mount_of cpu) || return 0
	if [[ -f $root/cpu.shares ]]; then # cpu and cpuacct mounted together
		echo 262144 >"$root/cpu.shares" && echo 262144 >"$root/$sandbox/cpu.shares"
		return 0
	fi
	mkcg "$c/$name" && mkcg "$c/$name/$sandbox" || return 0
	echo 262144 >"$c/$name/cpu.shares" && echo 262144 >"$c/$name/$sandbox/cpu.shares" &&
		procs+=("$c/$name/$sandbox/cgroup.procs")
}
prioritise || echo "note: no cpu share for the loop; it relies on nice"

nice -n -20 bash -c 'while :; do :; done' &
loop_pid=$!
for p in "${procs[@]}"; do
	echo "$loop_pid" >"$p" || fail "cannot move the loop into $p"
done
grep -qx "$loop_pid" "${procs[0]}" && ok || fail "loop not in ${procs[0]}"

"$meter" "$root" "$sandbox" "$seconds" "$(nproc)" "$expect_mem" && ok || fail "cgroup_meter ($mode)"
finish

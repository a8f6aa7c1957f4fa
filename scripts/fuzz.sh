#!/usr/bin/env bash
# Fuzzes meter's parsers with libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (clang; scripts/setup.sh fuzz installs it).
#
#   scripts/fuzz.sh [TARGET[,TARGET...]|all] [SECONDS]
#
# TARGET names fuzz/fuzz_TARGET.c (routes, query, csv, time, agent_doc,
# cgroup, checks_create, checks_wake, sandbox_event, account_create,
# key_create, key_limits, prices); default all. Each target runs SECONDS
# (default 60), starting from its corpus in fuzz/corpus/TARGET, which is
# only read: new inputs go to BUILD/corpus/TARGET. At the end one line per
# target tells the inputs tried (execs), the coverage reached and whether it
# crashed; a crash leaves its input in BUILD/crashes/TARGET/ (add it to
# fuzz/regressions/TARGET/ once fixed: ctest replays that directory).
#
# Environment: METER_FUZZ_BUILD (build directory, default build-fuzz),
# METER_FUZZ_JOBS (targets fuzzed at once, default 1),
# METER_FUZZ_MERGE=1 (afterwards, add to fuzz/corpus/TARGET only the new
# inputs that reach new coverage: libFuzzer's -merge=1).
# Exit status: 0 when no target crashed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${METER_FUZZ_BUILD:-$root/build-fuzz}
jobs=${METER_FUZZ_JOBS:-1}
what=${1:-all}
seconds=${2:-60}
all_targets=(routes query csv time agent_doc cgroup checks_create checks_wake sandbox_event
	account_create key_create key_limits prices)

[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a whole number" >&2; exit 2; }
if [[ "$what" == all ]]; then
	targets=("${all_targets[@]}")
else
	IFS=, read -r -a targets <<<"$what"
	for t in "${targets[@]}"; do
		[[ " ${all_targets[*]} " == *" $t "* ]] || {
			echo "fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2
			exit 2
		}
	done
fi
bash "$root/scripts/setup.sh" fuzz

echo "building the fuzz targets into $build (clang, libFuzzer, ASan + UBSan) ..."
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DMETER_FUZZ=ON -DBUILD_TESTING=OFF >"$build/configure.log" 2>&1 || {
	cat "$build/configure.log" >&2
	exit 1
}
cmake --build "$build" -j"$(nproc)" --target fuzz_targets -- --no-print-directory \
	>"$build/build.log" 2>&1 || {
	# The log's last lines whatever they say (a missing target names no
	# error or warning).
	tail -40 "$build/build.log" >&2
	echo "build failed: see $build/build.log" >&2
	exit 1
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# fuzz_one TARGET: runs it for $seconds; its log is BUILD/logs/TARGET.log.
fuzz_one() {
	local t=$1 work=$build/corpus/$1 crashes=$build/crashes/$1 log=$build/logs/$1.log
	mkdir -p "$work" "$crashes" "$build/logs"
	local inputs=("$work" "$root/fuzz/corpus/$t")
	[[ -d "$root/fuzz/regressions/$t" ]] && inputs+=("$root/fuzz/regressions/$t")
	"$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-max_len=8192 -print_final_stats=1 -artifact_prefix="$crashes/" \
		"${inputs[@]}" >"$log" 2>&1 || echo "CRASHED" >>"$log"
	if [[ "${METER_FUZZ_MERGE:-0}" == 1 ]] && ! grep -q '^CRASHED$' "$log"; then
		"$build/fuzz/fuzz_$t" -merge=1 "$root/fuzz/corpus/$t" "$work" >>"$log" 2>&1 ||
			echo "merge failed" >>"$log"
	fi
}

echo "fuzzing ${targets[*]} for ${seconds} s each ($jobs at a time) ..."
running=0
for t in "${targets[@]}"; do
	fuzz_one "$t" &
	running=$((running + 1))
	if ((running >= jobs)); then
		wait -n || true
		running=$((running - 1))
	fi
done
wait

status=0
printf '%-16s %14s %8s %8s  %s\n' target execs cov corpus result
for t in "${targets[@]}"; do
	log=$build/logs/$t.log
	execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
	done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE.*corp:' "$log" | head -1 || true)
	cov=$(grep -o 'cov: [0-9]*' <<<"$done_line" | grep -o '[0-9]*' || true)
	corp=$(grep -o 'corp: [0-9]*' <<<"$done_line" | grep -o '[0-9]*' || true)
	result=ok
	if grep -q '^CRASHED$' "$log"; then
		result="CRASHED: $(ls "$build/crashes/$t" | head -3 | tr '\n' ' ')(log: $log)"
		status=1
	fi
	printf '%-16s %14s %8s %8s  %s\n' "$t" "${execs:-?}" "${cov:-?}" "${corp:-?}" "$result"
done
exit $status

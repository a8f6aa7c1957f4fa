#!/usr/bin/env bash
# Ingestion benchmark (issue 3), a command of its own, not a test:
#   1. ingestion throughput beside raw COPY of the same rows into the same
#      samples table, in one run (tests/bench/bench_ingest.c): 10,000
#      sandboxes x 60 intervals = 610,000 samples each side by default
#      (--intervals 100 for the 1,010,000-sample run, about 2 minutes more);
#   2. the collector's CPU: meterd polling `meterctl simulate --hosts 1000
#      --sandboxes-per-host 100` every 10 s for 60 s, as % of one core
#      (utime + stime from /proc/<pid>/stat), and every 10 s its backlog and
#      ingest lag (whether ingestion keeps up).
# Everything runs on loopback against a throwaway PostgreSQL cluster of its
# own (scripts/pg.sh with its own METER_PG_DIR and port), built in Release
# into $METER_BENCH_BUILD (default build-bench). Bounded: under 5 minutes on
# a small machine.
#   scripts/bench-ingest.sh [--sandboxes N] [--intervals K]   (passed to part 1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${METER_BENCH_BUILD:-$root/build-bench}
work=$(mktemp -d /tmp/meter-bench.XXXXXX)
chmod 0755 "$work"
sim_pid=
meterd_pid=

free_port() {
	local p
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % 22000)) # below the ephemeral range (32768 up)
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	echo "bench-ingest: no free port" >&2
	exit 1
}

cleanup() {
	[[ -n $meterd_pid ]] && kill -TERM "$meterd_pid" 2>/dev/null && wait "$meterd_pid" 2>/dev/null
	[[ -n $sim_pid ]] && kill -TERM "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
	METER_PG_DIR=$work/pg bash "$root/scripts/pg.sh" stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "bench-ingest: building (Release) into $build ..."
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DMETER_WERROR=ON >"$work/configure.log" 2>&1 ||
	{ cat "$work/configure.log" >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" --target meterd meterctl bench_ingest >"$work/build.log" 2>&1 ||
	{ tail -20 "$work/build.log" >&2; exit 1; }

unset METER_DATABASE_URL
url=$(METER_PG_DIR=$work/pg METER_PG_PORT=$(free_port) bash "$root/scripts/pg.sh" start)
base=${url%/*}
psql "$url" -Atq -c "CREATE DATABASE bench_ingest" -c "CREATE DATABASE bench_collector"
echo "bench-ingest: machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# --- 1. ingestion vs raw COPY ------------------------------------------------
echo
[[ " $* " == *" --intervals "* ]] || set -- --intervals 60 "$@"
timeout 600 "$build/tests/bench_ingest" "$base/bench_ingest" "$@" 2>&1 | grep -v "migration applied"

# --- 2. the collector's CPU at 1,000 hosts x 100 sandboxes, 10 s period ------
echo
coll_url=$base/bench_collector
"$build/meterctl" migrate --database-url "$coll_url" >/dev/null 2>&1
"$build/meterctl" simulate --listen 127.0.0.1:0 --urls-file "$work/agents.txt" --hosts 1000 \
	--sandboxes-per-host 100 --seed 1 >"$work/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 100); do
	[[ -s $work/agents.txt && $(wc -l <"$work/agents.txt") -ge 1000 ]] && break
	sleep 0.1
done
port=$(free_port)
METER_DATABASE_URL=$coll_url "$build/meterd" --listen "127.0.0.1:$port" --api off \
	--agents-file "$work/agents.txt" --collector-period-s 10 --log-level warn \
	>"$work/meterd.log" 2>&1 &
meterd_pid=$!
sleep 1
hz=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$meterd_pid/stat"; }
c0=$(cpu)
t0=$(date +%s%N)
m() { echo "$metrics" | awk -v k="$1" '$1 == k {print $2}'; }
# Every 10 s: whether ingestion keeps up (the backlog and the lag must not
# grow from round to round; one round in flight is a backlog of 100000).
echo "collector: every 10 s:  rounds  ingested  backlog  lag s"
for i in 1 2 3 4 5 6; do
	sleep 10
	metrics=$(curl -s "http://127.0.0.1:$port/metrics")
	printf '  %3d s               %6s  %8s  %7s  %s\n' $((i * 10)) "$(m meter_collector_rounds_total)" \
		"$(m meter_samples_ingested_total)" "$(m meter_collector_backlog_samples)" \
		"$(m meter_ingest_lag_seconds)"
done
c1=$(cpu)
t1=$(date +%s%N)
pct=$(awk -v d=$((c1 - c0)) -v hz="$hz" -v ns=$((t1 - t0)) 'BEGIN {printf "%.1f", 100 * d / hz / (ns / 1e9)}')
echo "collector: 1000 hosts x 100 sandboxes, period 10 s, $(((t1 - t0) / 1000000000)) s measured"
echo "  rounds:               $(m meter_collector_rounds_total) (last took $(m meter_collector_round_seconds) s to read)"
echo "  agent reads ok/failed: $(m 'meter_agent_polls_total{result="ok"}') / $(m 'meter_agent_polls_total{result="failed"}')"
echo "  samples ingested:     $(m meter_samples_ingested_total) (backlog $(m meter_collector_backlog_samples), lag $(m meter_ingest_lag_seconds) s)"
echo "  meterd CPU:           $pct % of one core (target < 25 %)"

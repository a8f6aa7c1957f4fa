#!/usr/bin/env bash
# Benchmark: streamed usage export (meterctl report usage, the same code as
# GET /v1/reports/usage.csv) beside psql's \copy of the same query, in one
# run, on a cluster of its own. Prints rows/s and peak RSS of each and the
# ratio. Target: >= 50% of psql's rate, peak RSS < 50 MiB.
#   scripts/bench-export.sh [ROWS]     (default 10000000; 10,000 sandboxes)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rows=${1:-10000000}
sandboxes=10000
hours=$(((rows + sandboxes - 1) / sandboxes))
work=$root/.run/bench-export
build=${METER_BUILD_DIR:-$root/build}

bash "$root/scripts/setup.sh" bench
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF ${METER_BENCH_CMAKE_ARGS:-}
export METER_PG_DIR=$work/pg METER_PG_PORT=${METER_BENCH_PG_PORT:-54339}
unset METER_DATABASE_URL
trap 'bash "$root/scripts/pg.sh" destroy >/dev/null 2>&1 || true' EXIT
url=$(bash "$root/scripts/pg.sh" start)
"$build/meterctl" migrate --database-url "$url" >/dev/null 2>&1

echo "loading $((sandboxes * hours)) hourly rows ($sandboxes sandboxes x $hours hours) ..."
psql "$url" -qAt -v ON_ERROR_STOP=1 <<SQL
INSERT INTO accounts (account_id, name) VALUES ('acc_bench', 'bench');
INSERT INTO api_keys (account_id, key_id, secret_hash, role)
	VALUES ('acc_bench', 'key_bench', decode(repeat('00', 32), 'hex'), 'full');
INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)
	SELECT 'acc_bench', 'sbx_' || i, 'key_bench', 2, 4096, 'running'
	FROM generate_series(1, $sandboxes) i;
ALTER TABLE usage_hourly SET UNLOGGED;
INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id, day,
	running_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, cpu_micros, memory_micros,
	total_micros, cpu_cum_micros, memory_cum_micros)
	SELECT 'acc_bench', 'sbx_' || i, h, 1, 'key_bench', (h AT TIME ZONE 'UTC')::date,
		3600000000, 180000000000 + i, 180000000000 + i, 14745600000000, 1250 + i % 7,
		30000, 31250 + i % 7, 100000000, 100000000
	FROM generate_series(1, $sandboxes) i,
	     generate_series(timestamptz '2026-01-01T00:00:00Z',
			     timestamptz '2026-01-01T00:00:00Z' + ($hours - 1) * interval '1 hour',
			     interval '1 hour') h;
ALTER TABLE usage_hourly SET LOGGED;
VACUUM ANALYZE usage_hourly;
SQL
from=2026-01-01T00:00:00Z
to=$(psql "$url" -qAt -c "SELECT to_char((timestamptz '$from' + $hours * interval '1 hour') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')")

# The export's own query (reports/export.c, hour granularity), for psql.
query="SELECT to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), account_id,
 key_id, sandbox_id, div(sum(running_usec), 1000000), div(sum(paused_usec), 1000000),
 div(sum(cpu_used_mcus), 1000000), div(sum(cpu_billed_mcus), 1000000),
 div(sum(memory_mibus), 1000000), div(sum(storage_mibus), 1000000), sum(cpu_micros),
 sum(memory_micros), sum(storage_micros), sum(total_micros) FROM usage_hourly
 WHERE account_id = 'acc_bench' AND hour >= '$from' AND hour < '$to'
 GROUP BY hour, account_id, key_id, sandbox_id ORDER BY hour, key_id NULLS FIRST, sandbox_id"

# measure NAME COMMAND...: seconds and peak RSS (KiB) of one run.
measure() {
	local name=$1
	shift
	/usr/bin/time -f "%e %M" -o "$work/$name.time" "$@" >"$work/$name.out"
	read -r secs rss <"$work/$name.time"
	lines=$(($(wc -l <"$work/$name.out") - ${HEADER:-0}))
	echo "$name $secs $rss $lines"
}
mkdir -p "$work"
read -r _ psql_s psql_rss psql_rows < <(measure psql psql "$url" -qAt -c "\\copy ($query) TO STDOUT CSV")
read -r _ ours_s ours_rss ours_rows < <(HEADER=1 measure meterctl "$build/meterctl" report usage \
	--account acc_bench --from "$from" --to "$to" --granularity hour --format csv \
	--database-url "$url")
[[ $psql_rows == "$ours_rows" ]] || { echo "row counts differ: psql $psql_rows, meterctl $ours_rows" >&2; exit 1; }
cmp <(tr -d '\r' <"$work/meterctl.out" | tail -n +2) "$work/psql.out" >/dev/null ||
	{ echo "the exports differ from psql's rows" >&2; exit 1; }
rate() { awk -v r="$1" -v s="$2" 'BEGIN { printf "%d", (s > 0 ? r / s : 0) }'; }
psql_rate=$(rate "$psql_rows" "$psql_s")
ours_rate=$(rate "$ours_rows" "$ours_s")
echo
echo "export of $ours_rows hourly rows (identical to psql's, byte for byte apart from CRLF):"
printf '  %-34s %10s rows/s  %6s s  peak RSS %6d KiB\n' "psql \\copy (baseline)" "$psql_rate" "$psql_s" "$psql_rss"
printf '  %-34s %10s rows/s  %6s s  peak RSS %6d KiB\n' "meterctl report usage (CSV)" "$ours_rate" "$ours_s" "$ours_rss"
awk -v a="$ours_rate" -v b="$psql_rate" 'BEGIN { printf "  ratio: %.0f%% of psql (target >= 50%%)\n", (b > 0 ? 100 * a / b : 0) }'
rm -f "$work"/*.out

#!/usr/bin/env bash
# Benchmark: the dashboard's overview and sandboxes pages on a real fleet's
# data: 10,000 sandboxes x 30 days of hourly rollups (7.2 million usage rows)
# in one account, read by wrk with a read-only key's session. Prints
# requests/s, p50, p95 and p99 per page, for each number of concurrent
# connections given (default "1 4"). Target: p95 < 100 ms.
# A Release build into build-bench/ and a PostgreSQL cluster of its own,
# removed at the end; loopback only.
#   scripts/bench-dashboard.sh [SECONDS] ["CONNECTIONS ..."]    (default 10 s, "1 4")
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-10}
conn_list=${2:-1 4}
sandboxes=10000
days=30
hours=$((days * 24))
build=${METER_BENCH_BUILD:-$root/build-bench}
work=$(mktemp -d /tmp/meter-bench-dashboard.XXXXXX)
chmod 755 "$work"
meterd_pid=

free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	return 1
}

export METER_PG_DIR=$work/pg
METER_PG_PORT=$(free_port)
export METER_PG_PORT
unset METER_DATABASE_URL
cleanup() {
	[[ -n $meterd_pid ]] && kill -TERM "$meterd_pid" 2>/dev/null && wait "$meterd_pid" 2>/dev/null
	bash "$root/scripts/pg.sh" destroy >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

bash "$root/scripts/setup.sh" bench
echo "building Release into $build ..."
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DMETER_WERROR=ON
url=$(bash "$root/scripts/pg.sh" start)
"$build/meterctl" migrate --database-url "$url" >/dev/null 2>&1

# The fleet: 10 keys (UTC, New York, Kolkata, ...), 10,000 sandboxes in all
# states, each metered every hour of the last 30 days up to the current hour
# at its own size and load, so sums, sorts and the floor all have work to do.
echo "loading $((sandboxes * hours)) hourly rows ($sandboxes sandboxes x $hours hours) ..."
start=$(date +%s)
psql "$url" -qAt -v ON_ERROR_STOP=1 <<SQL
INSERT INTO accounts (account_id, name) VALUES ('acc_bench', 'bench');
INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros, time_zone)
	SELECT 'acc_bench', 'key_' || g, sha256(('key_' || g)::bytea), 'full', 500000000,
	       (ARRAY['UTC', 'America/New_York', 'Asia/Kolkata', 'Europe/Berlin', 'UTC'])[g % 5 + 1]
	FROM generate_series(0, 9) g;
INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib, state)
	SELECT 'acc_bench', 'sbx_' || lpad(i::text, 5, '0'), 'key_' || i % 10, 1 + i % 4,
	       1024 * (1 + i % 8), (ARRAY['running', 'running', 'paused', 'stopped'])[i % 4 + 1]::meter_state
	FROM generate_series(1, $sandboxes) i;
-- A bulk load: foreign keys are not re-checked row by row (every row below
-- refers to the sandboxes, key and price version made above).
SET session_replication_role = replica;
INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_version, key_id, day,
	running_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, cpu_micros, memory_micros,
	total_micros, cpu_cum_micros, memory_cum_micros)
	SELECT 'acc_bench', 'sbx_' || lpad(i::text, 5, '0'), h, 1, 'key_' || i % 10,
	       meter_key_day(k.time_zone, h), 3600000000, used, GREATEST(used, 50 * 3600000000::bigint),
	       mem * 3600000000::bigint, 1 + i % 97, mem * 30000 / 4096, 1 + i % 97 + mem * 30000 / 4096,
	       (1 + i % 97) * (j + 1), mem * 30000 / 4096 * (j + 1)
	FROM generate_series(1, $sandboxes) i
	JOIN api_keys k ON k.account_id = 'acc_bench' AND k.key_id = 'key_' || i % 10
	CROSS JOIN generate_series(0, $hours - 1) j
	CROSS JOIN LATERAL (SELECT date_trunc('hour', now()) - ($hours - 1 - j) * interval '1 hour' AS h,
		1024 * (1 + i % 8) AS mem,
		-- used millicore-µs this hour: mostly idle, some busy
		(CASE WHEN (i * 31 + j) % 17 = 0 THEN (1 + i % 4) * 1000 ELSE 5 + (i + j) % 40 END)
		    * 3600000000::bigint AS used) t
	ORDER BY i, j;
RESET session_replication_role;
INSERT INTO sandbox_meter (account_id, sandbox_id, last_sampled_at, last_state, last_cpu_usec,
	last_memory_mib, last_storage_mib, last_vcpus, price_version, cpu_cum_micros,
	memory_cum_micros)
	SELECT 'acc_bench', 'sbx_' || lpad(i::text, 5, '0'), date_trunc('hour', now()), 'running',
	       0, 1024 * (1 + i % 8), 0, 1 + i % 4, 1, (1 + i % 97) * $hours,
	       1024 * (1 + i % 8) * 30000 / 4096 * $hours
	FROM generate_series(1, $sandboxes) i;
INSERT INTO key_day_ledger (account_id, key_id, day, spent_micros, held_micros, limit_micros)
	SELECT u.account_id, u.key_id, u.day, sum(u.total_micros), 0, 500000000
	FROM usage_hourly u GROUP BY u.account_id, u.key_id, u.day;
SELECT meter_dashboard_rebuild();
VACUUM ANALYZE;
SQL
echo "loaded in $(($(date +%s) - start)) s"

key=$("$build/meterctl" key create --account acc_bench --role read_only --database-url "$url" |
	jq -r .secret)
port=$(free_port)
METER_DATABASE_URL=$url METER_LOG_LEVEL=warn "$build/meterd" --listen "127.0.0.1:$port" \
	>"$work/meterd.log" 2>&1 &
meterd_pid=$!
for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
cookie=$(curl -s -o /dev/null -D - --data-urlencode "key=$key" \
	"http://127.0.0.1:$port/dashboard/sign-in" | tr -d '\r' |
	sed -n 's/^[Ss]et-[Cc]ookie: \([^;]*\).*/\1/p' | head -1)
[[ -n $cookie ]] || { echo "sign-in failed" >&2; cat "$work/meterd.log" >&2; exit 1; }

pages=("/dashboard/" "/dashboard/sandboxes" "/dashboard/sandboxes?sort=cost_month"
	"/dashboard/sandboxes?sort=id&page=150" "/dashboard/sandboxes?state=paused&key_id=key_3"
	"/dashboard/sandboxes/sbx_04242")
for p in "${pages[@]}"; do
	code=$(curl -s -o "$work/page.html" -w '%{http_code}' -H "Cookie: $cookie" "http://127.0.0.1:$port$p")
	[[ $code == 200 ]] || { echo "$p answered $code" >&2; head -c 600 "$work/page.html" >&2; exit 1; }
done

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
worst=0
for conns in $conn_list; do
	echo
	printf '%-48s %7s %8s %8s %8s\n' "page ($conns connection(s), ${secs}s each)" "req/s" "p50 ms" \
		"p95 ms" "p99 ms"
	for p in "${pages[@]}"; do
		r=$(METER_BENCH_COOKIE=$cookie wrk -t"$(((conns + 1) / 2 > 2 ? 2 : (conns + 1) / 2))" \
			-c"$conns" -d"${secs}s" -s "$root/scripts/bench/dashboard.lua" \
			"http://127.0.0.1:$port$p" | grep '^RESULT')
		if [[ $(field "$r" non2xx) != 0 || $(field "$r" errors) != 0 ]]; then
			echo "$p: non-2xx $(field "$r" non2xx), errors $(field "$r" errors)" >&2
			exit 1
		fi
		printf '%-48s %7s %8s %8s %8s\n' "$p" "$(field "$r" rps)" "$(field "$r" p50_ms)" \
			"$(field "$r" p95_ms)" "$(field "$r" p99_ms)"
		worst=$(awk -v a="$worst" -v b="$(field "$r" p95_ms)" 'BEGIN {print (b > a ? b : a)}')
	done
done
echo
echo "slowest p95: $worst ms (target < 100 ms)"

#!/usr/bin/env bash
# The collector inside meterd, and the push route, through the real binaries:
# - a cgroup directory (a fake v2 layout: cpu.stat files) is read every
#   period; a sandbox without a record is metered as unattributed, with
#   vcpus = this machine's CPU count;
# - simulated host agents plus a dead one: the live ones are read and
#   ingested, the dead one is counted as a scrape error of its own host;
# - POST /v1/samples: roles, 400 naming the field, idempotent retries, a
#   document far above 64 KiB, 413 above 16 MiB, 503 with no database;
# - GET /metrics in the Prometheus text format;
# - --api off serves /healthz, /readyz and /metrics only.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
export PGTZ=UTC
work=$bin/test-collector-$$
mkdir -p "$work"
pids=()
cp_token=collector-test-cp-token-0123456789
op_token=collector-test-op-token-0123456789

stop_all() {
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -KILL "$p"; done
	return 0
}
cleanup_fns+=(stop_all)

# start_meterd LOG ARGS...: sets port, base and meterd_pid.
start_meterd() {
	local log=$1
	shift
	port=$(free_port)
	METER_CONTROL_PLANE_TOKEN=$cp_token METER_OPERATOR_TOKEN=$op_token "$bin/meterd" \
		--listen "127.0.0.1:$port" "$@" >"$log" 2>&1 &
	meterd_pid=$!
	pids+=("$meterd_pid")
	base=http://127.0.0.1:$port
	wait_for 20 curl -fs "$base/healthz" || { tail -20 "$log" >&2; fail "meterd did not start"; finish; }
}

url=$(make_db collector)
cleanup_fns+=("drop_db collector")
"$bin/meterctl" migrate --database-url "$url" >/dev/null
psql "$url" -Atq -c "INSERT INTO accounts (account_id, name) VALUES ('acct_t', 't')" \
	-c "INSERT INTO api_keys (account_id, key_id, secret_hash, role) VALUES
	    ('acct_t', 'kt1', decode(repeat('ab', 32), 'hex'), 'full')"
q() { psql "$url" -Atq -c "$1"; }
# jstr KEY FILE / jnum KEY FILE: a string or number field of a flat JSON answer.
jstr() { grep -o "\"$1\":\"[^\"]*\"" "$2" | head -1 | sed 's/^[^:]*:"\(.*\)"$/\1/'; }
jnum() { grep -o "\"$1\":[0-9]*" "$2" | head -1 | cut -d: -f2; }

# --- sources: a cgroup directory, simulated agents and a dead agent ------------
mkdir -p "$work/cg/sbx_cg1"
echo "usage_usec 1000000" >"$work/cg/sbx_cg1/cpu.stat"
"$bin/meterctl" simulate --listen 127.0.0.1:0 --urls-file "$work/agents.txt" --hosts 3 \
	--sandboxes-per-host 4 --seed 3 --speed 60 --key-ids kt1 >"$work/sim.log" 2>&1 &
pids+=($!)
wait_for 10 test -s "$work/agents.txt" || fail "simulator did not start"
dead="http://127.0.0.1:$(free_port)/hosts/dead"
echo "$dead" >>"$work/agents.txt"
METER_DATABASE_URL=$url start_meterd "$work/meterd.log" --cgroup-root "$work/cg" \
	--host-id test-host --agents-file "$work/agents.txt" --collector-period-s 1 \
	--agent-timeout-ms 500
for i in 1 2 3 4 5; do
	sleep 1
	echo "usage_usec $((1000000 + i * 500000))" >"$work/cg/sbx_cg1/cpu.stat"
done
# (wait_for runs its command again: a function, so that the query runs again too.)
cg_metered() { [[ $(q "SELECT count(*) > 0 FROM usage_hourly WHERE sandbox_id = 'sbx_cg1'") == t ]]; }
wait_for 10 cg_metered ||
	fail "cgroup sandbox not metered"
expect "cgroup sandbox unattributed" \
	"$(q "SELECT account_id || ' ' || COALESCE(key_id, '-') || ' ' || vcpus FROM sandboxes
	      WHERE sandbox_id = 'sbx_cg1'")" "unattributed - $(nproc)"
expect "cgroup samples' host" "$(q "SELECT DISTINCT host_id FROM samples WHERE sandbox_id = 'sbx_cg1'")" \
	test-host
cg_used=$(q "SELECT sum(cpu_used_mcus) FROM usage_hourly WHERE sandbox_id = 'sbx_cg1'")
[[ $cg_used -gt 0 && $cg_used -le 2500000000 ]] && ok || fail "cgroup CPU used: $cg_used"
live_hosts() { [[ $(q "SELECT count(DISTINCT host_id) FROM samples WHERE host_id LIKE 'h%'") == 3 ]]; }
wait_for 10 live_hosts ||
	fail "not every live agent was ingested"
[[ $(q "SELECT count(*) FROM sandboxes WHERE key_id = 'kt1' AND account_id = 'acct_t'") -gt 0 ]] &&
	ok || fail "agents' sandboxes not attributed to the document's key"
[[ $(q "SELECT count(*) FROM usage_hourly WHERE key_id = 'kt1'") -gt 0 ]] && ok ||
	fail "agents' usage not metered"
# The gauges are set after each commit: give a loaded machine time to get there.
# (The text is searched as a here-string, not through a pipe: grep -q leaves
# at its first match, and under pipefail a writer still writing to it then
# fails the check with SIGPIPE.)
lag_gauge() {
	local m
	m=$(curl -s "$base/metrics") && grep -q '^# TYPE meter_ingest_lag_seconds gauge' <<<"$m"
}
wait_for 10 lag_gauge || true
metrics=$(curl -s "$base/metrics")
grep -q "^meter_agent_scrape_errors_total{host=\"$dead\"} [1-9]" <<<"$metrics" && ok ||
	fail "dead agent's errors not counted"
live_errors=$(grep '^meter_agent_scrape_errors_total' <<<"$metrics" | grep -vF "$dead" || true)
[[ -z $live_errors ]] && ok || fail "a live agent has scrape errors: $live_errors"
grep -qE '^meter_samples_ingested_total [1-9]' <<<"$metrics" && ok || fail "no samples_ingested"
grep -q '^# TYPE meter_ingest_lag_seconds gauge' <<<"$metrics" && ok || fail "no lag gauge"
grep -qE '^meter_collector_rounds_total [1-9]' <<<"$metrics" && ok || fail "no rounds"
expect "ledger = rollups" "$(q "SELECT count(*) FROM key_day_ledger l WHERE spent_micros <>
  (SELECT COALESCE(sum(total_micros), 0) FROM usage_hourly u
   WHERE u.account_id = l.account_id AND u.key_id = l.key_id AND u.day = l.day)")" 0

# --- POST /v1/samples ---------------------------------------------------------
now=$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)
doc="{\"host_id\":\"push1\",\"sampled_at\":\"$now\",\"sandboxes\":[{\"sandbox_id\":\"sbx_p1\",
 \"key_id\":\"kt1\",\"state\":\"running\",\"vcpus\":2,\"memory_mib\":1024,\"cpu_usec\":5}]}"
post() { curl -s -o "$work/body" -w '%{http_code}' -X POST -H "Content-Type: application/json" "$@"; }
expect "push without a token" "$(post --data "$doc" "$base/v1/samples")" 401
expect "push" "$(post -H "Authorization: Bearer $cp_token" --data "$doc" "$base/v1/samples")" 200
expect "push answer" "$(cat "$work/body")" '{"accepted":1,"ignored":0,"anomalies":0}'
expect "push again (a retry)" "$(post -H "Authorization: Bearer $op_token" --data "$doc" \
	"$base/v1/samples")" 200
expect "retry answer" "$(cat "$work/body")" '{"accepted":0,"ignored":1,"anomalies":0}'
# A key_id that is no key: kept, under 'unattributed', and said so.
bad_doc=${doc//sbx_p1/sbx_p2}
bad_doc=${bad_doc//\"kt1\"/\"kt_none\"}
expect "push, unknown key" "$(post -H "Authorization: Bearer $cp_token" --data "$bad_doc" \
	"$base/v1/samples")" 200
expect "unknown key answer" "$(cat "$work/body")" '{"accepted":1,"ignored":0,"anomalies":1}'
expect "unknown key's sandbox" "$(q "SELECT account_id || ' ' || COALESCE(key_id, '-')
  FROM sandboxes WHERE sandbox_id = 'sbx_p2'")" "unattributed -"
grep -q 'key_id that is no full, unrevoked key.*sandbox sbx_p2, key_id kt_none' "$work/meterd.log" && ok ||
	fail "no warning for the unknown key"
expect "bad vcpus" "$(post -H "Authorization: Bearer $cp_token" --data "${doc/\"vcpus\":2/\"vcpus\":0}" \
	"$base/v1/samples")" 400
expect "field named" "$(jstr code "$work/body") $(jstr field "$work/body")" \
	"invalid_request sandboxes[0].vcpus"
expect "unknown field" "$(post -H "Authorization: Bearer $cp_token" \
	--data "${doc/\"state\"/\"colour\":1,\"state\"}" "$base/v1/samples")" 400
expect "not JSON" "$(post -H "Authorization: Bearer $cp_token" --data "{nope" "$base/v1/samples")" 400
# A document for 3,000 sandboxes: far above the API's 64 KiB.
{
	printf '{"host_id":"push2","sampled_at":"%s","sandboxes":[' "$now"
	for i in $(seq 3000); do
		((i > 1)) && printf ','
		printf '{"sandbox_id":"sbx_big_%d","state":"running","vcpus":1,"memory_mib":512,"cpu_usec":%d}' "$i" "$i"
	done
	printf ']}'
} >"$work/big.json"
[[ $(stat -c %s "$work/big.json") -gt 65536 ]] && ok || fail "big document too small"
expect "big push" "$(post -H "Authorization: Bearer $cp_token" --data-binary "@$work/big.json" \
	"$base/v1/samples")" 200
expect "big push answer" "$(jnum accepted "$work/body")" 3000
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$work/huge.json"
expect "over 16 MiB" "$(post -H "Authorization: Bearer $cp_token" --data-binary "@$work/huge.json" \
	"$base/v1/samples")" 413
expect "unattributed push visible" "$(q "SELECT count(*) FROM usage_hourly WHERE sandbox_id
  LIKE 'sbx_big_%'")" 0 # a baseline only: one sample, no interval yet
expect "unattributed push rows" "$(q "SELECT count(*) FROM sandboxes WHERE account_id =
  'unattributed' AND sandbox_id LIKE 'sbx_big_%'")" 3000
kill -TERM "$meterd_pid"
wait "$meterd_pid" && ok || fail "meterd did not stop cleanly"
grep -q "meterd stopped" "$work/meterd.log" && ok || fail "no clean stop"

# --- no database: the push route fails closed with 503 ---------------------------
METER_DATABASE_URL="postgresql://nobody:x@127.0.0.1:$(free_port)/none" \
	start_meterd "$work/meterd-nodb.log" --collector off
expect "push without a database" "$(post -H "Authorization: Bearer $cp_token" --data "$doc" \
	"$base/v1/samples")" 503
expect "503 code" "$(jstr code "$work/body")" metering_unavailable
kill -TERM "$meterd_pid"
wait "$meterd_pid" || true

# --- api off: operational routes only ----------------------------------------------
METER_DATABASE_URL=$url start_meterd "$work/meterd-apioff.log" --api off
expect "api off: healthz" "$(http_status "$base/healthz")" 200
expect "api off: readyz" "$(http_status "$base/readyz")" 200
expect "api off: metrics" "$(http_status "$base/metrics")" 200
expect "api off: keys" "$(http_status -H "Authorization: Bearer $op_token" "$base/v1/keys")" 404
expect "api off: push" "$(post -H "Authorization: Bearer $cp_token" --data "$doc" \
	"$base/v1/samples")" 404
kill -TERM "$meterd_pid"
wait "$meterd_pid" || true
expect "both off refused" "$(METER_DATABASE_URL=$url "$bin/meterd" --api off --collector off \
	>/dev/null 2>&1; echo $?)" 2

# --- sources that give nothing: rounds of no samples keep the collector going -----
# (an empty backlog once passed a null pointer to memmove, which the
# sanitizers stopped meterd for on its first round)
mkdir -p "$work/cg-empty"
METER_DATABASE_URL=$url start_meterd "$work/meterd-empty.log" --cgroup-root "$work/cg-empty" \
	--host-id test-host --collector-period-s 1
sleep 2.5
kill -0 "$meterd_pid" 2>/dev/null && ok || fail "meterd stopped on rounds of no samples"
expect "empty rounds counted" "$(curl -s "$base/metrics" |
	grep -cE '^meter_collector_rounds_total [2-9]')" 1
kill -TERM "$meterd_pid"
wait "$meterd_pid" && ok || fail "meterd did not stop cleanly after empty rounds"
expect "no sanitizer report" \
	"$(grep -c -E 'AddressSanitizer|runtime error|LeakSanitizer' "$work/meterd-empty.log")" 0

# --- the backlog bound -------------------------------------------------------
# Rounds of three samples (three cgroup sandboxes). A bound below one round
# still lets every round be ingested while the database answers; the bound
# is for what waits while it does not.
mkdir -p "$work/cg-bl/sbx_bl1" "$work/cg-bl/sbx_bl2" "$work/cg-bl/sbx_bl3"
for i in 1 2 3; do echo "usage_usec 1000" >"$work/cg-bl/sbx_bl$i/cpu.stat"; done
METER_DATABASE_URL=$url start_meterd "$work/meterd-bl.log" --cgroup-root "$work/cg-bl" \
	--host-id bl-host --collector-period-s 1 --collector-backlog-max 2
bl_all_three() { [[ $(q "SELECT count(DISTINCT sandbox_id) FROM samples WHERE host_id = 'bl-host'") == 3 ]]; }
wait_for 10 bl_all_three || fail "a round larger than the backlog bound was not ingested"
kill -TERM "$meterd_pid"
wait "$meterd_pid" || true
# Ingestion failing for 6 s (the samples table locked, and every attempt
# waiting at it has its session ended, as in an outage) with a bound of two
# rounds: the newest rounds are kept, so the round read just before the
# failures end is ingested once they have.
METER_DATABASE_URL=$url start_meterd "$work/meterd-bl2.log" --cgroup-root "$work/cg-bl" \
	--host-id bl-host --collector-period-s 1 --collector-backlog-max 6
PGAPPNAME=bl-locker psql "$url" -Atq -c "BEGIN; LOCK TABLE samples IN ACCESS EXCLUSIVE MODE;
	SELECT pg_sleep(60); COMMIT" >/dev/null 2>&1 &
locker=$!
pids+=("$locker")
for _ in $(seq 20); do
	sleep 0.3
	q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()
	   AND application_name = 'meter' AND wait_event_type = 'Lock'" >/dev/null
done
released=$(q "SELECT extract(epoch FROM clock_timestamp())")
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bl-locker'" \
	>/dev/null
wait "$locker" 2>/dev/null || true
bl_after() {
	[[ $(q "SELECT count(*) > 0 FROM samples WHERE host_id = 'bl-host' AND
		extract(epoch FROM sampled_at) > $released") == t ]]
}
wait_for 10 bl_after || fail "no round ingested after the lock"
expect "the newest round before the lock went is kept" \
	"$(q "SELECT count(*) > 0 FROM samples WHERE host_id = 'bl-host' AND
	      extract(epoch FROM sampled_at) BETWEEN $released - 2.5 AND $released")" t
grep -qE '^meter_collector_dropped_samples_total [1-9]' <<<"$(curl -s "$base/metrics")" && ok ||
	fail "no samples counted as dropped"
kill -TERM "$meterd_pid"
wait "$meterd_pid" || true
finish

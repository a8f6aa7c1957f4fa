#!/usr/bin/env bash
# meterd as it runs: health and readiness, routing fallbacks, request ids,
# an outage of its database (start-up while down, loss, recovery without a
# restart), a clean stop on SIGTERM, and secrets kept from other processes.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
work=$bin/test-meterd-$$
mkdir -p "$work"
pid=

stop_meterd() {
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
	pid=
}
cleanup_fns+=(stop_meterd)

# stop_clean WHAT: SIGTERM to meterd, which must exit 0 ("meterd WHAT").
stop_clean() {
	kill -TERM "$pid"
	wait "$pid" || fail "meterd $1 did not stop cleanly"
	pid=
}

# start_meterd LOG ARGS...: starts meterd on a free port; sets pid and base.
# With nofile set, under that open-file limit (soft and hard).
start_meterd() {
	local log=$1 port
	shift
	port=$(free_port)
	(
		[[ -z ${nofile:-} ]] || ulimit -n "$nofile"
		exec "$bin/meterd" --listen "127.0.0.1:$port" "$@"
	) >"$log" 2>&1 &
	pid=$!
	base=http://127.0.0.1:$port
	wait_for 10 curl -fs "$base/healthz" || { cat "$log" >&2; fail "meterd did not start"; finish; }
}

# --- against the shared test cluster -------------------------------------
url=$(make_db meterd)
cleanup_fns+=("drop_db meterd")
"$bin/meterctl" migrate --database-url "$url" >/dev/null
METER_DATABASE_URL=$url start_meterd "$work/meterd.log"

expect "healthz" "$(http_status "$base/healthz")" 200
expect "healthz body" "$(curl -s "$base/healthz")" '{"status":"ok"}'
expect "readyz" "$(http_status "$base/readyz")" 200
expect "unknown path" "$(http_status "$base/nope")" 404
expect "404 body" "$(curl -s "$base/nope")" '{"error":{"code":"not_found","message":"no such route"}}'
expect "wrong method" "$(http_status -X POST "$base/healthz")" 405
curl -s -D "$work/h" -o /dev/null -X DELETE "$base/readyz"
grep -qi '^Allow: GET' "$work/h" && ok || fail "405 without Allow: GET"
curl -s -D "$work/h" -o /dev/null "$base/healthz"
grep -qiE '^X-Request-Id: [0-9a-f]{16}' "$work/h" && ok || fail "no X-Request-Id"
grep -q 'access rid=.* method=GET path="/healthz" status=200' "$work/meterd.log" && ok ||
	fail "no access-log line"
# Without a webhook, events still go to the outbox: the log says so.
grep -q 'no webhook_url: spend_limit_crossed and hold_outrun events are kept' \
	"$work/meterd.log" && ok || fail "no word of the webhook's absence"
# ...and its /metrics counts them, so a backlog no process sends shows.
psql "$url" -Atq -c "INSERT INTO webhook_outbox (account_id, type, dedup_key, payload, created_at)
	VALUES ('unattributed', 'hold_outrun', 'meterd-test', '{}', now() - interval '100 seconds')"
backlog_shown() {
	local m
	m=$(curl -s "$base/metrics")
	grep -qx 'meter_webhook_pending_events 1' <<<"$m" &&
		grep -qE '^meter_webhook_oldest_pending_seconds 1[0-9]{2}(\.[0-9]+)?$' <<<"$m"
}
wait_for 10 backlog_shown && ok || fail "no webhook backlog in /metrics without a webhook_url"
psql "$url" -Atq -c "DELETE FROM webhook_outbox WHERE dedup_key = 'meterd-test'"
# A thousand query arguments would overflow the connection's 64 KiB in
# libmicrohttpd (which then hung until the timeout): refused at once.
many_args=$(printf 'a=1&%.0s' $(seq 1000))
expect "a thousand query arguments" "$(http_status "$base/healthz?$many_args")" 400
# A request libmicrohttpd refuses before any handler sees it (a header
# line over the connection's 64 KiB: it answers 431 itself) is logged and
# freed when its connection closes: the sanitizers' leak check at exit,
# below, holds the free.
big_header=$(head -c 70000 /dev/zero | tr '\0' a)
curl -s -o /dev/null -m 2 -H "X-Big: $big_header" "$base/healthz" || true
refused='access rid=.* method=- path="-" status=0 dur_us=[0-9]* aborted=1'
for _ in $(seq 20); do grep -q "$refused" "$work/meterd.log" && break; sleep 0.1; done
grep -q "$refused" "$work/meterd.log" && ok ||
	fail "no access line for a request refused before its handler"
# A path cannot end the access line's quotes and write fields of its own.
expect "quote in a path" "$(http_status "$base/nope%22%20status=200%20x%5C%01")" 404
grep -q 'access rid=.* path="/nope\\" status=200 x\\\\\\x01" status=404 ' "$work/meterd.log" && ok ||
	fail "a path's quote not escaped in the access line"
# Nor can a method: one that is no HTTP token is quoted, its bytes escaped.
mport=${base##*:}
printf 'GET\tstatus=201\x1b[31m /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' |
	timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$mport; cat >&3; cat <&3" >/dev/null 2>&1 || true
for _ in $(seq 20); do grep -q 'method="GET\\x09status=201\\x1b\[31m"' "$work/meterd.log" && break; sleep 0.1; done
grep -q 'method="GET\\x09status=201\\x1b\[31m" path="/healthz" status=' "$work/meterd.log" && ok ||
	fail "a method that is no token not quoted in the access line"

# SIGHUP does not end it (a reload sent by habit): said and ignored.
kill -HUP "$pid"
wait_for 5 grep -q "SIGHUP received and ignored" "$work/meterd.log" && ok || fail "no SIGHUP line"
expect "healthz after SIGHUP" "$(http_status "$base/healthz")" 200

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
expect "exit status after SIGTERM" "$status" 0
grep -q "meterd stopped" "$work/meterd.log" && ok || fail "no clean-stop line"

# A client refused over the per-IP limit again and again (each refusal a
# diagnostic of libmicrohttpd's) does not fill the log: one line of each
# kind every 10 s, and the server still serves another address.
METER_DATABASE_URL=$url start_meterd "$work/perip.log" --per-ip-connections 3 --collector off
pport=${base##*:}
held=()
for _ in 1 2 3; do
	exec {fd}<>"/dev/tcp/127.0.0.1/$pport"
	held+=("$fd")
done
refused() { grep -c "connection limit" "$work/perip.log"; }
refused_once() { [[ $(refused) -ge 1 ]]; }
curl -s -o /dev/null -m 1 "http://127.0.0.1:$pport/healthz" || true
wait_for 5 refused_once || fail "no line for a refused connection"
for _ in $(seq 300); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$pport" && exec {fd}>&- || true
done
expect "healthz from another address meanwhile" \
	"$(http_status --interface 127.0.0.2 "http://127.0.0.1:$pport/healthz")" 200
expect "lines for 301 refused connections" "$(refused)" 1
for fd in "${held[@]}"; do exec {fd}>&-; done
stop_clean "with a per-IP limit"

# An open-file limit too low for max_connections: meterd cannot raise it,
# so it lowers max_connections to fit beside the descriptors it needs for
# the rest (256, the database pool's 4, and 2 for each HTTP thread: 9 for
# 1,024 connections, 2 for 36): 300 - 264 = 36. The 37th connection waits
# to be accepted, and is served once one of the 36 closes.
nofile=300 METER_DATABASE_URL=$url start_meterd "$work/nofile.log" --collector off \
	--max-connections 1024 --db-pool-size 4
nofile=
grep -q "open-file limit 300 is below max_connections 1024 + 278 (18 for 9 HTTP threads, 4 for the database pool, 256 for the rest): max_connections lowered to 36" \
	"$work/nofile.log" && ok || fail "no line for max_connections lowered: $(cat "$work/nofile.log")"
nport=${base##*:}
held=()
for _ in $(seq 36); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$nport"
	held+=("$fd")
done
expect "the 37th connection beside 36 held" \
	"$(curl -s -o /dev/null -w '%{http_code}' -m 1 "$base/healthz")" 000
exec {held[0]}>&-
expect "the 37th once one of 36 closed" "$(http_status "$base/healthz")" 200
for fd in "${held[@]:1}"; do exec {fd}>&-; done
expect "readyz with its pool under the limit" "$(http_status "$base/readyz")" 200
stop_clean "under a low open-file limit"
# ... and never raises it: 4 fit under 100 beside nothing else.
nofile=100 METER_DATABASE_URL=$url start_meterd "$work/nofile4.log" --collector off \
	--max-connections 4 --db-pool-size 4
nofile=
grep -q "max_connections kept at 4" "$work/nofile4.log" && ok ||
	fail "max_connections not kept at 4: $(cat "$work/nofile4.log")"
stop_clean "with 4 connections under a low open-file limit"

# Memory that runs out is the server's fault, never the client's: 500, not
# 413 or 400, which would have a host agent drop its document. The
# sanitizers' allocator is told to fail every allocation over 8 MiB (so
# this runs only in a sanitizer build): a body that grows past it, and a
# 5 MB document whose 60,000 samples need about 11 MB, and half of it,
# whose ingestion needs more than 8 MiB at once; and a statement of
# 40,000 lines (about 9 MB), which answered 503 "the database is
# unreachable" and logged a message never written.
if ldd "$bin/meterd" | grep -q libasan; then
	psql "$url" -Atq -c "INSERT INTO sandboxes (account_id, sandbox_id, vcpus, memory_mib,
		state, created_at) SELECT 'unattributed', 'oom' || i, 1, 1, 'running',
		'2026-11-01T00:00:00Z' FROM generate_series(1, 40000) i" \
		-c "INSERT INTO usage_hourly (account_id, sandbox_id, hour, day, price_version,
		running_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, total_micros)
		SELECT 'unattributed', 'oom' || i, '2026-11-02T00:00:00Z', '2026-11-02', 1,
		1000000, 0, 50000000, 1000000, 0 FROM generate_series(1, 40000) i" >/dev/null
	ASAN_OPTIONS=$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=8 \
		METER_DATABASE_URL=$url METER_AGENT_TOKEN=agent-oom-0123456789abcdefghijklmn \
		METER_OPERATOR_TOKEN=op-oom-0123456789abcdefghijklmnopq \
		start_meterd "$work/oom.log" --collector off
	auth="Authorization: Bearer agent-oom-0123456789abcdefghijklmn"
	head -c 9000000 /dev/zero | tr '\0' ' ' >"$work/big-body"
	code=$(curl -s -o "$work/oom-body.json" -w '%{http_code}' -X POST -H "$auth" \
		-H 'Content-Type: application/json' --data-binary @"$work/big-body" \
		"$base/v1/samples")
	expect "a body past the memory there is" "$code" 500
	expect "its error" "$(jq -r .error.code "$work/oom-body.json")" internal
	{
		printf '{"host_id":"h1","sampled_at":"2026-11-30T00:00:00Z","sandboxes":['
		for i in $(seq 60000); do
			((i > 1)) && printf ','
			printf '{"sandbox_id":"s%d","state":"running","vcpus":1,"memory_mib":1,"cpu_usec":0}' "$i"
		done
		printf ']}'
	} >"$work/many.json"
	code=$(curl -s -o "$work/oom-doc.json" -w '%{http_code}' -X POST -H "$auth" \
		-H 'Content-Type: application/json' --data-binary @"$work/many.json" \
		"$base/v1/samples")
	expect "a document whose samples do not fit in memory" "$code" 500
	expect "its error" "$(jq -r .error.code "$work/oom-doc.json")" internal
	# Half as many fit, but ingesting them does not.
	head -c "$(($(stat -c %s "$work/many.json") / 2))" "$work/many.json" |
		sed 's/,{[^}]*$/]}/' >"$work/half.json"
	code=$(curl -s -o "$work/oom-ingest.json" -w '%{http_code}' -X POST -H "$auth" \
		-H 'Content-Type: application/json' --data-binary @"$work/half.json" \
		"$base/v1/samples")
	expect "a document that cannot be ingested in memory" "$code" 500
	expect "its error" "$(jq -r .error.code "$work/oom-ingest.json")" internal
	code=$(curl -s -o "$work/oom-statement.json" -w '%{http_code}' \
		-H "Authorization: Bearer op-oom-0123456789abcdefghijklmnopq" \
		"$base/v1/reports/statement.csv?month=2026-11&account_id=unattributed")
	expect "a statement that does not fit in memory" "$code" 500
	expect "its error" "$(jq -r .error.code "$work/oom-statement.json")" internal
	grep -q "statement: out of memory" "$work/oom.log" && ok ||
		fail "no log line for the statement out of memory"
	expect "healthz after running out" "$(http_status "$base/healthz")" 200
	stop_clean "out of memory"
fi

# Retention: the sweeper drops the samples of days past
# sample_retention_days (a partition 45 days old, a row of 2001 outside
# every partition) and keeps the rest (10 days old, today).
psql "$url" -Atq -c "INSERT INTO sandboxes (account_id, sandbox_id, vcpus, memory_mib, state,
		created_at) VALUES ('unattributed', 'ret1', 1, 1, 'running', '2000-01-01T00:00:00Z')" \
	-c "SELECT meter_ensure_sample_partitions(d - 45, d - 45), meter_ensure_sample_partitions(d - 10, d)
		FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS d) t" \
	-c "INSERT INTO samples (account_id, sandbox_id, sampled_at, state, cpu_usec, memory_mib,
		storage_mib, vcpus, host_id)
		SELECT 'unattributed', 'ret1', x, 'running', 0, 1, 0, 1, 'h-ret'
		FROM unnest(ARRAY[timestamptz '2001-01-01T00:00:00Z', now() - interval '45 days',
		now() - interval '10 days', now()]) x" >/dev/null
parts() {
	psql "$url" -Atq -c "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'samples'::regclass AND c.relname = 'samples_' ||
		to_char((now() AT TIME ZONE 'UTC')::date - $1, 'YYYYMMDD')"
}
expect "the partition of 45 days ago before" "$(parts 45)" 1
METER_DATABASE_URL=$url start_meterd "$work/retain.log" --collector off \
	--sample-retention-days 30
old_gone() { [[ $(parts 45) == 0 ]]; }
wait_for 15 old_gone && ok || fail "the partition of 45 days ago is still there"
expect "the partition of 10 days ago" "$(parts 10)" 1
expect "today's" "$(parts 0)" 1
expect "samples left" "$(psql "$url" -Atq -c "SELECT count(*) FROM samples WHERE sandbox_id = 'ret1'")" 2
grep -q "samples: 1 daily partitions of days more than 30 before today dropped" \
	"$work/retain.log" && ok || fail "no line for the partitions dropped"
# The sweeper makes tomorrow's partition ahead, at its start.
expect "tomorrow's" "$(parts -1)" 1
stop_clean "with retention"

# A reader that holds samples for its whole run (pg_dump does) does not
# hold ingestion up: a document of a day with no partition (20 days ago)
# waits 1 s for the partition's lock, then goes on with its samples in
# samples_default, and says so; the partition is tried again a minute
# later. It was ingested only once the reader let go (10 s here: 503
# statement_timeout), and every write of samples waited behind it.
agent=agent-part-0123456789abcdefghijklmn
METER_DATABASE_URL=$url METER_AGENT_TOKEN=$agent start_meterd "$work/part.log" --collector off
PGAPPNAME=meterd-test-reader psql "$url" -Atq \
	-c "BEGIN; SELECT count(*) FROM samples; SELECT pg_sleep(20)" >/dev/null 2>&1 &
reader=$!
sleep 1
cat >"$work/old-day.json" <<JSON
{"host_id":"h-part","sampled_at":"$(date -u -d '20 days ago' +%Y-%m-%dT%H:%M:%SZ)",
 "sandboxes":[{"sandbox_id":"part1","state":"running","vcpus":1,"memory_mib":64,"cpu_usec":0}]}
JSON
t0=$(date +%s%N)
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 15 -H "Authorization: Bearer $agent" \
	-H 'Content-Type: application/json' --data-binary @"$work/old-day.json" "$base/v1/samples")
took_ms=$((($(date +%s%N) - t0) / 1000000))
expect "a document of a day with no partition beside a long reader" "$code" 200
((took_ms < 5000)) && ok || fail "it took $took_ms ms"
expect "its sample, in samples_default" \
	"$(psql "$url" -Atq -c "SELECT count(*) FROM samples_default WHERE sandbox_id = 'part1'")" 1
grep -q "ingest: the sample partitions of .* wait for a lock on samples" "$work/part.log" && ok ||
	fail "no line for the partition not made"
psql "$url" -Atq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE application_name = 'meterd-test-reader'" >/dev/null
wait "$reader" 2>/dev/null || true
stop_clean "beside a long reader"

# A database that takes no writes (default_transaction_read_only, as a
# standby): not ready, and the sweeper, whose every step fails there, says
# so once and tries again every 30 s instead of logging each step every
# second.
ro_url=$(make_db meterd_ro)
cleanup_fns+=("drop_db meterd_ro")
"$bin/meterctl" migrate --database-url "$ro_url" >/dev/null
ro_acc=$("$bin/meterctl" account create --name RO --database-url "$ro_url" | jq -r .account_id)
ro_key=$(METER_DATABASE_URL=$ro_url "$bin/meterctl" key create --account "$ro_acc" --role full |
	jq -r .key_id)
psql "$ro_url" -Atq -c "ALTER DATABASE t_meterd_ro_$$ SET default_transaction_read_only = on"
ro_cp=cp-ro-0123456789abcdefghijklmnopqrstu
ro_op=op-ro-0123456789abcdefghijklmnopqrstu
METER_DATABASE_URL=$ro_url METER_CONTROL_PLANE_TOKEN=$ro_cp METER_OPERATOR_TOKEN=$ro_op \
	start_meterd "$work/ro.log" --collector off
expect "readyz on a read-only database" "$(http_status "$base/readyz")" 503
ro_create() {
	http_status -X POST -H "Authorization: Bearer $ro_cp" -H 'Content-Type: application/json' \
		--data "{\"key_id\":\"$ro_key\",\"sandbox_id\":\"$1\",\"vcpus\":1,\"memory_mib\":64,\"lease_seconds\":60}" \
		"$base/v1/checks/create"
}
expect "a check on a read-only database" "$(ro_create ro1)" 503
expect "an account on a read-only database" "$(http_status -X POST \
	-H "Authorization: Bearer $ro_op" --data '{"name":"X"}' "$base/v1/accounts")" 503
sleep 4
expect "the sweeper's word of it" "$(grep -c "the database takes no writes" "$work/ro.log")" 1
ro_failures=$(grep -c "read-only transaction" "$work/ro.log")
((ro_failures <= 8)) && ok || fail "$ro_failures failed statements logged in 4 s"
# The setting off again: every session made while it was on (the pool's,
# the check engine's, the sweeper's) is made again once it refuses a
# write, and meterd serves without a restart.
psql "$admin_url" -Atq -c "ALTER DATABASE t_meterd_ro_$$ RESET default_transaction_read_only"
ro_ready() { [[ $(http_status "$base/readyz") == 200 ]]; }
wait_for 10 ro_ready && ok || fail "not ready once the database takes writes again"
expect "a check once the database takes writes again" "$(ro_create ro2)" 200
expect "an account once the database takes writes again" "$(http_status -X POST \
	-H "Authorization: Bearer $ro_op" --data '{"name":"X"}' "$base/v1/accounts")" 201
stop_clean "on a read-only database"

# A role whose connection limit leaves the request pool one connection:
# the check engine connects at start, so checks are served however many
# requests came first. (Connecting at the first check, it found every slot
# taken by the pool, and every check was answered 503 while reads were
# served.)
lim_url=$(make_db meterd_lim)
cleanup_fns+=("drop_db meterd_lim")
"$bin/meterctl" migrate --database-url "$lim_url" >/dev/null
lim_acc=$("$bin/meterctl" account create --name Lim --database-url "$lim_url" | jq -r .account_id)
lim_key=$(METER_DATABASE_URL=$lim_url "$bin/meterctl" key create --account "$lim_acc" \
	--role full | jq -r .key_id)
lim_role=meter_lim_$$
drop_lim_role() { psql "$admin_url" -Atq -c "DROP ROLE IF EXISTS $lim_role" >/dev/null 2>&1; }
psql "$admin_url" -Atq -c "CREATE ROLE $lim_role LOGIN PASSWORD 'pw-lim-0123' CONNECTION LIMIT 6"
cleanup_fns+=(drop_lim_role)
psql "$lim_url" -Atq -c "GRANT ALL ON SCHEMA public TO $lim_role;
	GRANT ALL ON ALL TABLES IN SCHEMA public TO $lim_role;
	GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO $lim_role;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO $lim_role" >/dev/null
lim_as=$(sed -E "s#^postgresql://[^@]*@#postgresql://$lim_role:pw-lim-0123@#" <<<"$lim_url")
lim_cp=cp-lim-0123456789abcdefghijklmnopqrst
lim_op=op-lim-0123456789abcdefghijklmnopqrst
METER_DATABASE_URL=$lim_as METER_CONTROL_PLANE_TOKEN=$lim_cp METER_OPERATOR_TOKEN=$lim_op \
	start_meterd "$work/lim.log" --collector off --db-pool-size 8
sleep 3 # its threads' connections made
reads=()
for _ in 1 2 3 4 5 6; do
	curl -s -o /dev/null --max-time 5 -H "Authorization: Bearer $lim_op" "$base/v1/prices" &
	reads+=($!)
done
wait "${reads[@]}" || true
expect "a check beside a full pool" "$(http_status -X POST -H "Authorization: Bearer $lim_cp" \
	-H 'Content-Type: application/json' \
	--data "{\"key_id\":\"$lim_key\",\"sandbox_id\":\"lim1\",\"vcpus\":1,\"memory_mib\":64,\"lease_seconds\":60}" \
	"$base/v1/checks/create")" 200
stop_clean "under a role's connection limit"
drop_db meterd_lim
drop_lim_role

# A database whose sessions start as replicas (session_replication_role, a
# superuser's setting) would fire none of meter's triggers: its
# connections are refused, saying why, and meterd is not ready.
srr_url=$(make_db meterd_srr)
cleanup_fns+=("drop_db meterd_srr")
"$bin/meterctl" migrate --database-url "$srr_url" >/dev/null
psql "$admin_url" -Atq -c "ALTER DATABASE t_meterd_srr_$$ SET session_replication_role = replica"
METER_DATABASE_URL=$srr_url start_meterd "$work/srr.log" --collector off
expect "readyz on a database of replica sessions" "$(http_status "$base/readyz")" 503
wait_for 5 grep -q "session_replication_role is not origin" "$work/srr.log" && ok ||
	fail "no word of session_replication_role: $(cat "$work/srr.log")"
stop_clean "on a database of replica sessions"

# A second SIGTERM while a request is still under way (a read of the price
# book waiting at its locked table) stops it at once, with status 1.
op=op-again-0123456789abcdefghijklmnopq
METER_DATABASE_URL=$url METER_OPERATOR_TOKEN=$op start_meterd "$work/again.log"
PGAPPNAME=meterd-test-locker psql "$url" -Atq -c "BEGIN;
	LOCK TABLE price_book IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(8); COMMIT" \
	>/dev/null 2>&1 &
locker=$!
# (wait_for runs its command again: functions, so that the queries run again.)
locked() {
	[[ $(psql "$url" -Atq -c "SELECT count(*) FROM pg_locks l JOIN pg_class c
		ON c.oid = l.relation WHERE c.relname = '${1:-price_book}'
		AND l.mode = 'AccessExclusiveLock' AND l.granted") == 1 ]]
}
waiting() {
	[[ $(psql "$url" -Atq -c "SELECT count(*) > 0 FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND application_name = 'meter'") == t ]]
}
wait_for 10 locked || fail "the table was not locked"
curl -s -o /dev/null -m 10 -H "Authorization: Bearer $op" "$base/v1/prices" &
waiter=$!
wait_for 10 waiting || fail "the readiness check did not wait at the lock"
kill -TERM "$pid"
wait_for 5 grep -q "shutting down" "$work/again.log" || true
sleep 0.2
started=$(date +%s%N)
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
took_ms=$((($(date +%s%N) - started) / 1000000))
pid=
expect "exit status after a second SIGTERM" "$status" 1
grep -q "SIGTERM received again: stopping at once" "$work/again.log" && ok ||
	fail "no line for the second SIGTERM"
((took_ms < 1000)) && ok || fail "the second SIGTERM took $took_ms ms"
psql "$url" -Atq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE application_name = 'meterd-test-locker'" >/dev/null
wait "$waiter" 2>/dev/null || true
wait "$locker" 2>/dev/null || true
# One SIGTERM while only the schema gate's reading waits at that lock:
# a clean stop at once, its reading cancelled, not one held for the
# statement timeout (30 s here).
METER_DATABASE_URL=$url start_meterd "$work/gate-stop.log" --collector off \
	--db-statement-timeout-ms 30000
PGAPPNAME=meterd-test-locker psql "$url" -Atq -c "BEGIN;
	LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(20); COMMIT" \
	>/dev/null 2>&1 &
locker=$!
wait_for 10 locked schema_migrations || fail "the table was not locked"
gate_waiting() {
	[[ $(psql "$url" -Atq -c "SELECT count(*) > 0 FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND application_name = 'meter'
		AND query LIKE '%schema_migrations%'") == t ]]
}
wait_for 10 gate_waiting || fail "the gate's reading did not wait at the lock"
# The readiness check's own reading gives that lock up after a second too,
# saying why, not "unreachable" after the statement timeout (30 s).
started=$(date +%s%N)
curl -s -m 10 "$base/readyz" >"$work/readyz-locked"
took_ms=$((($(date +%s%N) - started) / 1000000))
grep -q '"code":"metering_unavailable","message":"the database.s schema cannot be read now: another session holds schema_migrations locked' \
	"$work/readyz-locked" && ok || fail "readyz at a locked schema: $(cat "$work/readyz-locked")"
((took_ms < 3000)) && ok || fail "readyz at a locked schema took $took_ms ms"
kill -TERM "$pid"
started=$(date +%s%N)
status=0
wait "$pid" || status=$?
took_ms=$((($(date +%s%N) - started) / 1000000))
pid=
expect "exit status of a stop with the gate at a lock" "$status" 0
((took_ms < 5000)) && ok || fail "a stop with the gate's reading at a lock took $took_ms ms"
psql "$url" -Atq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE application_name = 'meterd-test-locker'" >/dev/null
wait "$locker" 2>/dev/null || true

# Secrets: a token given as a flag still works, is gone from the command
# line (every local user can read one) and is warned about; and the process
# is not dumpable, so another process of its own user cannot read its
# environment (where the other token is) or its memory. Run as nobody, as
# a root process could read them anyway.
port=$(free_port)
METER_DATABASE_URL=$url METER_OPERATOR_TOKEN=op-env-secret-0123456789abcdefghij \
	setpriv --reuid=nobody --regid=nogroup --clear-groups "$bin/meterd" \
	--listen "127.0.0.1:$port" --collector 0 \
	--control-plane-token cp-argv-secret-0123456789abcdefghi >"$work/secrets.log" 2>&1 &
pid=$!
base=http://127.0.0.1:$port
wait_for 10 curl -fs "$base/healthz" || { cat "$work/secrets.log" >&2; fail "meterd as nobody did not start"; }
expect "flag token works" \
	"$(http_status -H 'Authorization: Bearer cp-argv-secret-0123456789abcdefghi' "$base/v1/prices")" 200
tr '\0' ' ' </proc/"$pid"/cmdline | grep -q 'cp-argv-secret' &&
	fail "the token is still in the command line" || ok
grep -q 'secret options on the command line (control_plane_token)' "$work/secrets.log" && ok ||
	fail "no warning about a secret flag"
setpriv --reuid=nobody --regid=nogroup --clear-groups cat /proc/"$pid"/environ >/dev/null 2>&1 &&
	fail "another process of meterd's user read its environment" || ok
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
expect "exit status of meterd as nobody" "$status" 0

# A webhook without a secret, or with a short one, is refused at start:
# its events could be forged.
for secret in "" "short-secret"; do
	status=0
	METER_DATABASE_URL=$url METER_WEBHOOK_URL=http://127.0.0.1:9/hook \
		METER_WEBHOOK_SECRET=$secret "$bin/meterd" --listen 127.0.0.1:0 >"$work/wh.log" 2>&1 ||
		status=$?
	expect "webhook_secret '$secret' refused" "$status" 2
	grep -q "webhook_secret of at least 32 bytes" "$work/wh.log" && ok ||
		fail "no webhook_secret message"
done
# A short secret is refused without a webhook too (set ahead of its URL,
# it would fail only once the URL comes).
status=0
METER_DATABASE_URL=$url METER_WEBHOOK_SECRET=short-secret timeout 20 "$bin/meterd" \
	--listen 127.0.0.1:0 >"$work/wh.log" 2>&1 || status=$?
expect "a short webhook_secret alone refused" "$status" 2
grep -q "webhook_secret must be at least 32 bytes" "$work/wh.log" && ok ||
	fail "no short webhook_secret message"

# One token per caller: the same token for two is refused at start (it
# would carry the rights of whichever is checked first).
status=0
METER_DATABASE_URL=$url METER_CONTROL_PLANE_TOKEN=same-token-0123456789abcdefghijkl \
	METER_AGENT_TOKEN=same-token-0123456789abcdefghijkl "$bin/meterd" --listen 127.0.0.1:0 >"$work/same.log" 2>&1 ||
	status=$?
expect "the same token for two callers refused" "$status" 2
grep -q "control_plane_token and agent_token are the same token" "$work/same.log" && ok ||
	fail "no same-token message"

# Configuration from a file, below the environment and flags.
# The file says warn, so no access lines (info) may be logged.
printf 'listen = 127.0.0.1:1\ndatabase_url = %s\nlog_level = warn\n' "$url" >"$work/meter.conf"
start_meterd "$work/meterd-conf.log" --config "$work/meter.conf"
expect "readyz with config file" "$(http_status "$base/readyz")" 200
grep -q "access rid=" "$work/meterd-conf.log" && fail "log_level from the file ignored" || ok
kill -TERM "$pid"
wait "$pid" || true
pid=
env -u METER_DATABASE_URL "$bin/meterd" --listen 127.0.0.1:0 >/dev/null 2>"$work/err" &&
	status=0 || status=$?
expect "meterd without a database" "$status" 2
"$bin/meterd" --listen nonsense --database-url "$url" >/dev/null 2>&1 && status=0 || status=$?
expect "meterd with a bad listen address" "$status" 2
# Bad values stop it at once with status 2, never a start that retries
# or ignores them.
bad_value() { # NAME ARGS...
	local name=$1 status
	shift
	timeout 10 "$bin/meterd" --listen 127.0.0.1:0 "$@" >/dev/null 2>"$work/err" &&
		status=0 || status=$?
	expect "meterd with $name" "$status" 2
	[[ $(wc -l <"$work/err") -ge 1 ]] && ok || fail "$name: no line saying why"
}
bad_value "a database URL libpq cannot read" --database-url garbage
bad_value "a webhook URL that is not http(s)" --database-url "$url" --webhook-url ftp://h/x \
	--webhook-secret 0123456789abcdef0123456789abcdef
# URLs libcurl or libpq read, with a value no request can succeed with:
# before, meterd started and retried them for ever.
bad_value "a webhook URL without a host" --database-url "$url" --webhook-url http://:8080/x \
	--webhook-secret 0123456789abcdef0123456789abcdef
grep -q "webhook_url has no host\|webhook_url is not a URL libcurl reads" "$work/err" && ok ||
	fail "webhook host: $(cat "$work/err")"
bad_value "a webhook URL that is its scheme alone" --database-url "$url" --webhook-url https:// \
	--webhook-secret 0123456789abcdef0123456789abcdef
bad_value "an agent URL without a host" --database-url "$url" --agents "http://:9/"
# The collector's settings are held to the same with the collector off:
# a typo shows at this start, not at the one that switches it on.
bad_value "an agent URL not http(s), collector off" --database-url "$url" --collector off \
	--agents gopher://h/
grep -q "collector (off): " "$work/err" && ok || fail "agents off: $(cat "$work/err")"
bad_value "an agents file that is missing, collector off" --database-url "$url" --collector off \
	--agents-file "$work/no-such-agents-file"
bad_value "a bad host id, collector off" --database-url "$url" --collector off --host-id 'bad host'
bad_value "a bad host id with agents only" --database-url "$url" --host-id 'bad host' \
	--agents http://127.0.0.1:9/
bad_value "the host id of the service's own readings" --database-url "$url" --collector off \
	--host-id lifecycle.stop
grep -q "host_id lifecycle.stop is the service's own" "$work/err" && ok ||
	fail "reserved host id: $(cat "$work/err")"
bad_value "an sslmode libpq does not take" --database-url "$url?sslmode=bogus"
grep -q "database_url: sslmode" "$work/err" && ok || fail "sslmode: $(cat "$work/err")"
# A token under 32 bytes is refused at start.
bad_value "an agent token under 32 bytes" --database-url "$url" \
	--agent-token 0123456789abcdef0123456789abcde
grep -q "agent_token needs at least 32 bytes" "$work/err" && ok ||
	fail "short token: $(cat "$work/err")"
bad_value "a port number past 65535" \
	--database-url "postgresql://u:secret-pw@127.0.0.1:70000/db"
grep -q "database_url: port" "$work/err" && ok || fail "port: $(cat "$work/err")"
grep -q "secret-pw" "$work/err" && fail "the URL echoed: $(cat "$work/err")" || ok
bad_value "a target_session_attrs libpq does not take" \
	--database-url "postgresql://127.0.0.1/db?target_session_attrs=Any"
bad_value "--config and no file" --database-url "$url" --config
bad_value "--config= and no file" --database-url "$url" --config=
bad_value "an agent URL with a query" --database-url "$url" --agents "http://127.0.0.1:1/x?q=1"
bad_value "an agents file that cannot be read" --database-url "$url" --agents-file "$work/none"
grep -q "agents_file: $work/none" "$work/err" && ok || fail "agents file: $(cat "$work/err")"
bad_value "a listen host that does not resolve" --database-url "$url" --collector off \
	--listen 256.1.1.1:1
bad_value "a database_schema that is not a plain lower-case name" --database-url "$url" \
	--database-schema Billing
grep -q "database_schema must be" "$work/err" && ok || fail "schema: $(cat "$work/err")"
METER_DATABASE_SCHEMA=pg_meter "$bin/meterctl" migrate --database-url "$url" >/dev/null \
	2>"$work/err" && status=0 || status=$?
expect "meterctl with a METER_DATABASE_SCHEMA it does not take" "$status" 2
grep -q "METER_DATABASE_SCHEMA must be" "$work/err" && ok || fail "schema: $(cat "$work/err")"

# --- a cluster of its own, to stop and start -----------------------------
export METER_PG_DIR=$work/pg METER_PG_PORT
unset METER_DATABASE_URL
METER_PG_PORT=$(free_port)
own_url=$(bash "$here/../../scripts/pg.sh" start)
cleanup_fns+=("bash $here/../../scripts/pg.sh stop")

# Not migrated: alive, not ready, until the schema is this binary's; and
# no work done meanwhile (the schema gate): a request that needs the
# database is answered 503 saying what to do, and the lease-end sweeper
# does not run its statements (which would fail every second).
op=op-schema-0123456789abcdefghijklmnop
METER_OPERATOR_TOKEN=$op start_meterd "$work/meterd-schema.log" --database-url "$own_url" \
	--collector off
prices() { curl -s --max-time 5 -H "Authorization: Bearer $op" "$base/v1/prices" "$@"; }
expect "readyz before migrating" "$(http_status "$base/readyz")" 503
curl -s "$base/readyz" | grep -q '"schema_version":0,' && ok || fail "readyz names the schema"
expect "a route that needs the database, before migrating" \
	"$(prices -o /dev/null -w '%{http_code}')" 503
prices | grep -q '"code":"metering_unavailable","message":"the database.s schema is at version 0, this meterd needs [0-9]*: run meterctl migrate"' &&
	ok || fail "the 503 says what to do: $(prices)"
curl -s "$base/metrics" | grep -qx 'meter_schema_current 0' && ok ||
	fail "/metrics does not show the schema is not current"
# An account key cannot be looked up on it: the 503 says why.
curl -s -H "Authorization: Bearer key_x.abcdefghijklmnopqrstuvwxyz0123456789" \
	"$base/v1/sandboxes" | grep -q '"message":"credentials cannot be checked now: the database.s schema is at version 0' &&
	ok || fail "a key's 503 does not say why"
sleep 2.5
grep -q "schema: the database's schema is at version 0" "$work/meterd-schema.log" && ok ||
	fail "the gate's word not in the log"
expect "sweeper statements failed before migrating" \
	"$(grep -c 'does not exist' "$work/meterd-schema.log")" 0
"$bin/meterctl" migrate --database-url "$own_url" >/dev/null
expect "readyz once migrated" "$(http_status "$base/readyz")" 200
expect "the route once migrated" "$(prices -o /dev/null -w '%{http_code}')" 200
curl -s "$base/metrics" | grep -qx 'meter_schema_current 1' && ok ||
	fail "/metrics does not show the schema is current"
# Migrated past this binary while it runs (an old meterd left across an
# upgrade): the gate reads it by itself within a second or so, no
# readiness check needed, and opens again once put back.
psql "$own_url" -Atq -c "INSERT INTO schema_migrations (version, name, sha256)
  VALUES (9999, '9999_future', repeat('0', 64))"
gated() { [[ $(prices -o /dev/null -w '%{http_code}') == 503 ]]; }
wait_for 5 gated && ok || fail "the route still served on a newer schema"
prices | grep -q 'newer than this meterd.s [0-9]*: run the newer meterd' && ok ||
	fail "the 503 says newer: $(prices)"
expect "readyz on a newer schema" "$(http_status "$base/readyz")" 503
curl -s "$base/readyz" | grep -q 'newer than this meterd' && ok || fail "readyz says newer"
expect "healthz on a newer schema" "$(http_status "$base/healthz")" 200
psql "$own_url" -Atq -c "DELETE FROM schema_migrations WHERE version = 9999"
served() { [[ $(prices -o /dev/null -w '%{http_code}') == 200 ]]; }
wait_for 5 served && ok || fail "the route not served again once the newer row was gone"
expect "readyz once the newer row is gone" "$(http_status "$base/readyz")" 200
grep -q "schema: the database's schema is this meterd's again" "$work/meterd-schema.log" &&
	ok || fail "no word in the log of the gate opening again"
# Migrated by another build: a migration's text differs from this
# binary's, or one it records is not this binary's.
read -r latest sha < <(psql "$own_url" -Atq -F ' ' -c "SELECT version, sha256
  FROM schema_migrations ORDER BY version DESC LIMIT 1")
psql "$own_url" -Atq -c "UPDATE schema_migrations SET sha256 = repeat('0', 64)
  WHERE version = $latest"
expect "readyz on a changed migration" "$(http_status "$base/readyz")" 503
curl -s "$base/readyz" | grep -q 'changed after it was applied.*another build' && ok ||
	fail "readyz says changed: $(curl -s "$base/readyz")"
expect "a route that needs the database, on a changed migration" \
	"$(prices -o /dev/null -w '%{http_code}')" 503
psql "$own_url" -Atq -c "UPDATE schema_migrations SET sha256 = '$sha' WHERE version = $latest"
expect "readyz with the hash back" "$(http_status "$base/readyz")" 200
missing=$(psql "$own_url" -Atq -c "SELECT min(v) FROM generate_series(1, $latest) v
  WHERE v NOT IN (SELECT version FROM schema_migrations)")
[[ -n $missing ]] || fail "no number missing from the migrations to record a foreign one as"
psql "$own_url" -Atq -c "INSERT INTO schema_migrations (version, name, sha256)
  VALUES ($missing, 'not_ours', repeat('0', 64))"
expect "readyz on a migration not this binary's" "$(http_status "$base/readyz")" 503
curl -s "$base/readyz" | grep -q "records migration $missing, which this binary does not have" &&
	ok || fail "readyz says not ours: $(curl -s "$base/readyz")"
psql "$own_url" -Atq -c "DELETE FROM schema_migrations WHERE version = $missing"
# One of this binary's, below the newest, not recorded: a build without it.
psql "$own_url" -Atq -c "CREATE TABLE migration_kept AS SELECT * FROM schema_migrations
  WHERE version = $((latest - 1)); DELETE FROM schema_migrations WHERE version = $((latest - 1))"
expect "readyz with a migration missing" "$(http_status "$base/readyz")" 503
curl -s "$base/readyz" | grep -q "is not applied: the database was migrated by another build" &&
	ok || fail "readyz says missing: $(curl -s "$base/readyz")"
# meterctl migrate says the same and applies nothing: the missing one
# after the later ones would not make the schema they were written for.
before=$(psql "$own_url" -Atq -c "SELECT count(*) FROM schema_migrations")
out=$("$bin/meterctl" migrate --database-url "$own_url" 2>&1) && status=0 || status=$?
expect "meterctl migrate with a migration missing" "$status" 1
[[ $out == *"is not applied: the database was migrated by another build"* ]] &&
	ok || fail "meterctl migrate says missing: $out"
expect "migrations recorded after the refusal" \
	"$(psql "$own_url" -Atq -c "SELECT count(*) FROM schema_migrations")" "$before"
psql "$own_url" -Atq -c "INSERT INTO schema_migrations SELECT * FROM migration_kept;
  DROP TABLE migration_kept"
expect "readyz with every migration back" "$(http_status "$base/readyz")" 200
kill -TERM "$pid"
wait "$pid" || true
pid=
# Told a schema other than the one meter's tables are in (database_schema):
# not ready, saying where they are, and meterctl migrate refuses to make an
# empty second set of them there.
start_meterd "$work/meterd-other-schema.log" --database-url "$own_url" --collector off \
	--database-schema billing
expect "readyz told another schema" "$(http_status "$base/readyz")" 503
curl -s "$base/readyz" | grep -q 'tables are in schema \\"public\\", not in \\"billing\\"' &&
	ok || fail "readyz names the schema: $(curl -s "$base/readyz")"
kill -TERM "$pid"
wait "$pid" || true
pid=
METER_DATABASE_SCHEMA=billing "$bin/meterctl" migrate --database-url "$own_url" >/dev/null \
	2>"$work/err" && status=0 || status=$?
expect "meterctl migrate told another schema" "$status" 1
grep -q 'tables are in schema "public", not in "billing"' "$work/err" && ok ||
	fail "migrate names the schema: $(cat "$work/err")"
expect "no schema made" "$(psql "$own_url" -Atq -c "SELECT count(*) FROM pg_namespace
  WHERE nspname = 'billing'")" 0
bash "$here/../../scripts/pg.sh" stop

# Started while the database is down: alive, not ready, and it keeps trying.
start_meterd "$work/meterd-outage.log" --database-url "$own_url"
expect "readyz while the database is down" "$(http_status "$base/readyz")" 503
expect "503 body" "$(curl -s "$base/readyz")" \
	'{"error":{"code":"metering_unavailable","message":"database unreachable"}}'
expect "healthz while the database is down" "$(http_status "$base/healthz")" 200
bash "$here/../../scripts/pg.sh" start >/dev/null
ready() { [[ $(http_status "$base/readyz") == 200 ]]; }
wait_for 15 ready && ok || fail "not ready after the database came up"
grep -q "database connected" "$work/meterd-outage.log" && ok || fail "no 'database connected'"

# Lost while running, then back: recovers without a restart.
bash "$here/../../scripts/pg.sh" stop
not_ready() { [[ $(http_status "$base/readyz") == 503 ]]; }
wait_for 10 not_ready && ok || fail "still ready with the database stopped"
bash "$here/../../scripts/pg.sh" start >/dev/null
wait_for 15 ready && ok || fail "did not recover after the database restarted"
kill -0 "$pid" && ok || fail "meterd died during the outage"
kill -TERM "$pid"
wait "$pid" || true
pid=
# A stop while the server takes connections and never answers them (its
# postmaster stopped; the sessions made before still answer): an export
# under way and a schema reading at a lock are cancelled on threads of
# their own and their connections cut, so SIGTERM ends meterd with status
# 0 after the 2 s every request under way is given. PQcancel, which has
# no timeout, held it for ever.
postmaster=$(head -1 "$METER_PG_DIR/data/postmaster.pid")
"$bin/meterctl" migrate --database-url "$own_url" >/dev/null
hung_acc=$("$bin/meterctl" account create --name Hung --database-url "$own_url" | jq -r .account_id)
hung_key=$(METER_DATABASE_URL=$own_url "$bin/meterctl" key create --account "$hung_acc" \
	--role read_only | jq -r .key_id)
psql "$own_url" -Atq -c "INSERT INTO sandboxes (account_id, sandbox_id, key_id, vcpus, memory_mib,
  state) SELECT '$hung_acc', 'sbx_' || i, '$hung_key', 1, 512, 'running'
  FROM generate_series(1, 4000) i;
  INSERT INTO usage_hourly (account_id, sandbox_id, key_id, hour, price_version, day, running_usec,
  paused_usec, cpu_used_mcus, cpu_billed_mcus, memory_mibus, storage_mibus, cpu_micros,
  memory_micros, storage_micros, total_micros, cpu_cum_micros, memory_cum_micros,
  storage_cum_micros) SELECT '$hung_acc', 'sbx_' || i, '$hung_key', timestamptz '2026-03-01 00:00Z'
  + h * interval '1 hour', 1, '2026-03-01', 3600000000, 0, 0, 0, 0, 0, 7, 0, 0, 7, 7 * (h + 1),
  0, 0 FROM generate_series(1, 4000) i, generate_series(0, 23) h"
# Exits within limit_s of the SIGTERM with status 0 (the postmaster is let
# go again either way); the time taken into $stop_s.
# Whether meterd ($pid) exits within $1 seconds.
exits_within() {
	for _ in $(seq $(($1 * 10))); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}
stop_hung() {
	local limit_s=$1 t0 status
	t0=$(date +%s%N)
	kill -STOP "$postmaster"
	kill -TERM "$pid"
	exits_within "$limit_s" || true
	kill -CONT "$postmaster"
	if kill -0 "$pid" 2>/dev/null; then
		stop_s=never
		kill -KILL "$pid"
	else
		stop_s=$((($(date +%s%N) - t0) / 1000000))ms
	fi
	wait "$pid" && status=0 || status=$?
	pid=
	return "$status"
}
METER_OPERATOR_TOKEN=$op start_meterd "$work/meterd-hung-export.log" --database-url "$own_url" \
	--collector off
wait_for 15 ready || fail "not ready for the export"
exec 7<>/dev/tcp/127.0.0.1/"${base##*:}"
printf 'GET /v1/reports/usage.csv?account_id=%s&from=2026-03-01T00:00:00Z&to=2026-03-02T00:00:00Z HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n' \
	"$hung_acc" "$op" >&7
read -r -t 10 line <&7 || line=
[[ $line == "HTTP/1.1 200"* ]] && ok || fail "the export did not start: $line"
stop_hung 10 && ok || fail "meterd's exit status after a stop with an export and a hung server"
exec 7>&-
[[ $stop_s != never ]] && ok || fail "a stop with an export under way and a hung server never ended"
echo "stopped with an export under way and a hung server in $stop_s"
METER_OPERATOR_TOKEN=$op start_meterd "$work/meterd-hung-gate.log" --database-url "$own_url" \
	--collector off
wait_for 15 ready || fail "not ready for the schema reading"
psql "$own_url" -Atq -c "BEGIN" -c "LOCK TABLE schema_migrations" -c "SELECT pg_sleep(20)" \
	>/dev/null 2>&1 &
locker=$!
gate_waits() {
	[[ $(psql "$own_url" -Atq -c "SELECT count(*) FROM pg_locks WHERE NOT granted
	  AND relation = 'schema_migrations'::regclass") -gt 0 ]]
}
wait_for 10 gate_waits || fail "the schema reading did not wait at the lock"
stop_hung 10 && ok || fail "meterd's exit status after a stop with a schema reading and a hung server"
[[ $stop_s != never ]] && ok || fail "a stop with a schema reading and a hung server never ended"
echo "stopped with a schema reading at a lock and a hung server in $stop_s"
psql "$own_url" -Atq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
  WHERE query LIKE '%pg_sleep(20)%' AND pid <> pg_backend_pid()" >/dev/null
wait "$locker" || true
# Signals are taken at once, whatever the database does: with the
# postmaster stopped from the start, every connection meterd makes waits
# out the connect timeout. A SIGTERM while it waits for the schema gate at
# start stops it before it ever listens; one once it serves closes the
# listening socket at once (it was taken only after a ping, seconds later),
# and it still exits 0 (after those connects end). postmaster_hung runs
# "$@" with the postmaster stopped, and lets it go again whatever happens.
hung_port=$(free_port)
kill -STOP "$postmaster"
"$bin/meterd" --listen "127.0.0.1:$hung_port" --database-url "$own_url" --collector off \
	>"$work/meterd-hung-start.log" 2>&1 &
pid=$!
sleep 0.5
kill -TERM "$pid"
exits_within 30 && ok || fail "a stop during start-up with a hung server did not end"
kill -CONT "$postmaster"
wait "$pid" && ok || fail "meterd's exit status after a stop during start-up"
pid=
grep -q "meterd listening" "$work/meterd-hung-start.log" &&
	fail "meterd listened after a SIGTERM during start-up: $(cat "$work/meterd-hung-start.log")" ||
	ok
kill -STOP "$postmaster"
"$bin/meterd" --listen "127.0.0.1:$hung_port" --database-url "$own_url" --collector off \
	>"$work/meterd-hung-serving.log" 2>&1 &
pid=$!
serving() { curl -fs --max-time 1 "http://127.0.0.1:$hung_port/healthz" >/dev/null; }
wait_for 15 serving && ok || fail "meterd did not serve with a hung server"
sleep 1.5 # its watch now waits in a ping's connect
kill -TERM "$pid"
sleep 0.5
curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$hung_port/healthz" && status=0 || status=$?
expect "curl's exit status half a second after a SIGTERM (7: refused)" "$status" 7
exits_within 30 && ok || fail "a stop with a hung server did not end"
kill -CONT "$postmaster"
wait "$pid" && ok || fail "meterd's exit status after a stop with a hung server"
pid=
# A stop while the database watch's ping waits on a stopped backend: the
# ping ends after the stop has freed what it can, and tells the check
# engine the database is back: the engine and the pool are kept until it
# has ended (a use after free, exit status 1 under the sanitizers, before).
start_meterd "$work/meterd-ping.log" --database-url "$own_url" --collector off --db-pool-size 2
wait_for 15 ready || fail "not ready for the ping"
pinger=
pinging() {
	pinger=$(psql "$own_url" -Atq -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT 1'
	  AND application_name = 'meter' AND pid <> pg_backend_pid() LIMIT 1")
	[[ -n $pinger ]]
}
wait_for 10 pinging || fail "no backend of the watch's ping"
kill -STOP "$pinger"
sleep 1.2 # the next ping waits on it
kill -TERM "$pid"
sleep 0.5
kill -CONT "$pinger"
wait "$pid" && ok || fail "meterd's exit status after a stop during a ping: $(grep -A80 ERROR "$work/meterd-ping.log")"
pid=
# A server with fsync off: its commits are not on disk when they return.
# Served (nothing a session can change), and said once in the log; with
# fsync on, as above, never.
grep -q "fsync off" "$work/meterd-schema.log" "$work/meterd-outage.log" &&
	fail "warned of fsync off with it on" || ok
psql "$own_url" -Atq -c "ALTER SYSTEM SET fsync = off" -c "SELECT pg_reload_conf()" >/dev/null
fsync_off() { [[ $(psql "$own_url" -Atq -c "SHOW fsync") == off ]]; }
wait_for 10 fsync_off && ok || fail "fsync not off after the reload"
start_meterd "$work/meterd-fsync.log" --database-url "$own_url" --collector off
wait_for 15 ready && ok || fail "not ready with fsync off"
expect "fsync-off warnings" "$(grep -c "the server runs with fsync off" "$work/meterd-fsync.log")" 1
kill -TERM "$pid"
wait "$pid" || true
pid=
bash "$here/../../scripts/pg.sh" destroy
rm -rf "$work"
finish

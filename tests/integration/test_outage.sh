#!/usr/bin/env bash
# Database faults under a running meterd, on a PostgreSQL cluster of the
# test's own (scripts/pg.sh with METER_PG_DIR / METER_PG_PORT):
# 1. Outages: the cluster is stopped (fast shutdown: open transactions cut),
#    later crashed (immediate shutdown: every server process killed, WAL
#    replayed at the next start), and started again each time, in the middle
#    of a load of create checks, stop events and a simulated fleet pushing
#    its documents. Every check is answered within a bound, 503
#    metering_unavailable while the database is down, never 500; events,
#    reads and exports too; meterd recovers by itself (same process); once
#    the client retries what got a 503 (same idempotency keys, same event
#    times), nothing is half-written (every allowed check has its hold,
#    committed = spent + open holds) and ingestion equals an uninterrupted
#    run's, to the row.
# 2. Statement timeout: a transaction of the test holds key_day_ledger and
#    usage_hourly locked longer than meterd's statement timeout: checks,
#    events, ingestion, reads and exports answer a clean 503 JSON error in
#    time and meterd logs why; once the lock goes, the same requests
#    succeed.
# 3. Full disk (as root: a tablespace on a tiny tmpfs, then filled): checks
#    and ingestion that need a new page answer 503 and are logged; once the
#    space returns, the same requests succeed. Skipped, saying so, when the
#    test cannot mount a tmpfs.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
export PGTZ=UTC
work=$bin/test-outage-$$
mkdir -p "$work"
pgsh=$here/../../scripts/pg.sh
token=outage-control-plane-token-0123456789
kk1_secret=outageKeySecret0123456789abcdefghijklmn
limit=300000
# The check keys' zone: no 600 s lease of the run crosses their midnight.
kzone=$(midday_zone)
pid=
refpid=
client=
sims=()
tiny=

stop_all() {
	local p
	for p in $client "${sims[@]}"; do
		kill -0 "$p" 2>/dev/null && kill -TERM "$p"
	done
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
	[[ -n $refpid ]] && kill -0 "$refpid" 2>/dev/null && kill -KILL "$refpid"
	pid=
	refpid=
	return 0
}
unmount_tiny() {
	[[ -n $tiny ]] && mountpoint -q "$tiny" && umount "$tiny"
	return 0
}
cleanup_fns+=(stop_all)

# setup URL: schema, the fleet's account acct_c (kc1 UTC, kc2 Asia/Kolkata)
# and the checks' account acct_k (kk1: a daily limit and a known secret;
# kk2: no limit; both in $kzone).
setup() {
	"$bin/meterctl" migrate --database-url "$1" >/dev/null 2>&1 || { fail "migrate"; finish; }
	psql "$1" -Atq -v ON_ERROR_STOP=1 \
		-c "INSERT INTO accounts (account_id, name) VALUES ('acct_c', 'fleet'), ('acct_k', 'checks')" \
		-c "INSERT INTO api_keys (account_id, key_id, secret_hash, role, daily_limit_micros, time_zone) VALUES
		    ('acct_c', 'kc1', sha256('unused1'::bytea), 'full', NULL, 'UTC'),
		    ('acct_c', 'kc2', sha256('unused2'::bytea), 'full', NULL, 'Asia/Kolkata'),
		    ('acct_k', 'kk1', sha256('$kk1_secret'::bytea), 'full', $limit, '$kzone'),
		    ('acct_k', 'kk2', sha256('unused3'::bytea), 'full', NULL, '$kzone')"
}

# start_meterd URL PORT LOG VAR: meterd with a 1 s statement timeout and a
# 2 s lease grace (a stop's unmetered tail is held that long: these
# sandboxes get no samples); its pid goes to the variable VAR.
start_meterd() {
	METER_DATABASE_URL=$1 METER_CONTROL_PLANE_TOKEN=$token "$bin/meterd" \
		--listen "127.0.0.1:$2" --collector on --db-pool-size 4 \
		--db-statement-timeout-ms 1000 --lease-grace-s 2 >>"$3" 2>&1 &
	printf -v "$4" %s $!
}

sql() { psql "$own_url" -Atq -c "$1"; }

# post PATH BODY: one POST as the control plane (or with the bearer token in
# $auth); sets st (000: no answer), secs (the time it took), body and code.
post() {
	local out rc=0
	: >"$tmpf"
	out=$(curl -s -o "$tmpf" -w '%{http_code} %{time_total}' --max-time "${max_time:-30}" \
		-X "${method:-POST}" \
		-H "Authorization: Bearer ${auth:-$token}" -H 'Content-Type: application/json' \
		${2:+--data "$2"} "$base$1") || rc=$?
	st=${out%% *}
	secs=${out#* }
	((rc == 0)) || st=000
	body=
	IFS= read -r body <"$tmpf" || true
	code=-
	[[ $body =~ \"code\":\"([a-z_]+)\" ]] && code=${BASH_REMATCH[1]}
	return 0
}
tmpf=$work/body

create_body() { # I [KEY]
	echo "{\"key_id\":\"${2:-kk1}\",\"sandbox_id\":\"out-$1\",\"vcpus\":1,\"memory_mib\":1024,\"lease_seconds\":600,\"idempotency_key\":\"c-$1\"}"
}
stop_body() { echo "{\"type\":\"stopped\",\"at\":\"$1\"}"; }
now_rfc3339() {
	local now=$EPOCHREALTIME
	TZ=UTC printf '%(%Y-%m-%dT%H:%M:%S)T.%sZ' "${now%.*}" "${now#*.}"
}

# run_client LOG: create checks one after the other (one try each) until
# LOG.stop exists; every third allowed sandbox is stopped right away. One
# line per request: what, sandbox, status, seconds, error code (and the
# event's time).
run_client() {
	local i=0 at
	tmpf=$1.body
	while [[ ! -e $1.stop ]]; do
		post /v1/checks/create "$(create_body $i)"
		echo "create $i $st $secs $code" >>"$1"
		if [[ $st == 200 ]] && ((i % 3 == 0)); then
			at=$(now_rfc3339)
			post "/v1/sandboxes/out-$i/events" "$(stop_body "$at")"
			echo "stop $i $st $secs $code $at" >>"$1"
		fi
		i=$((i + 1))
		sleep 0.1
	done
}

# retry PATH BODY: post until the answer is not a 503 (60 tries, 0.25 s apart).
retry() {
	for _ in $(seq 60); do
		post "$1" "$2"
		[[ $st != 503 && $st != 000 ]] && return 0
		sleep 0.25
	done
	return 1
}

# Ingestion's rows (of the fleet's account and hosts), in a stable order.
ingest_digest() {
	psql "$1" -Atq -c "SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
	  $usage_digest_rows
	  UNION ALL SELECT format('l %s %s %s %s %s', account_id, key_id, day, spent_micros,
	    held_micros) FROM key_day_ledger WHERE account_id = 'acct_c'
	  UNION ALL SELECT format('m %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s', account_id,
	    sandbox_id, last_sampled_at, last_state, last_cpu_usec, last_memory_mib,
	    last_storage_mib, last_vcpus, price_version, cpu_rem, memory_rem, storage_rem,
	    cpu_cum_micros, memory_cum_micros, storage_cum_micros) FROM sandbox_meter
	  UNION ALL SELECT format('s %s %s %s %s %s %s %s %s %s', account_id, sandbox_id,
	    sampled_at, state, cpu_usec, memory_mib, storage_mib, vcpus, host_id) FROM samples
	  UNION ALL SELECT format('w %s %s %s', host_id, last_sampled_at, batches)
	    FROM ingest_watermarks) d"
}

# The ledger invariants of the checks' account; WHAT names the moment.
ledger_invariants() {
	expect "$1: held = open holds' remainders" "$(sql "SELECT count(*) FROM key_day_ledger l
	  WHERE held_micros <> (SELECT COALESCE(sum(GREATEST(amount_micros - consumed_micros, 0)), 0)
	  FROM holds h WHERE h.account_id = l.account_id AND h.key_id = l.key_id
	  AND h.day = l.day AND h.status = 'open')")" 0
	expect "$1: committed within the limit" "$(sql "SELECT count(*) FROM key_day_ledger
	  WHERE limit_micros IS NOT NULL AND spent_micros + held_micros > limit_micros")" 0
	expect "$1: every check sandbox has exactly one hold" "$(sql "SELECT count(*) FROM sandboxes s
	  WHERE account_id = 'acct_k' AND (SELECT count(*) FROM holds h
	  WHERE h.account_id = s.account_id AND h.sandbox_id = s.sandbox_id) <> 1")" 0
	expect "$1: every hold has its sandbox" "$(sql "SELECT count(*) FROM holds h
	  WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.account_id = h.account_id
	  AND s.sandbox_id = h.sandbox_id)")" 0
}

# ---- set-up: a cluster of our own, and a reference database ---------------------
export METER_PG_DIR=$work/pg METER_PG_PORT
unset METER_DATABASE_URL
METER_PG_PORT=$(free_port)
own_url=$(bash "$pgsh" start)
cleanup_fns+=("bash $pgsh destroy" unmount_tiny)
setup "$own_url"
ref_url=$(make_db outage_ref)
cleanup_fns+=("drop_db outage_ref")
setup "$ref_url"

port=$(free_port)
base=http://127.0.0.1:$port
start_meterd "$own_url" "$port" "$work/meterd.log" pid
refport=$(free_port)
start_meterd "$ref_url" "$refport" "$work/meterd-ref.log" refpid
wait_for 20 curl -fs "$base/readyz" || { tail "$work/meterd.log" >&2; fail "meterd"; finish; }
wait_for 20 curl -fs "http://127.0.0.1:$refport/readyz" || { fail "reference meterd"; finish; }

# ---- 1. outage ----------------------------------------------------------------------
# The fleet: 60 steps, paced at 0.3 s (outages or not), and the same steps
# without pacing into the reference.
sim_args=(--steps 60 --seed 5 --hosts 2 --sandboxes-per-host 15 --key-ids "kc1,kc2"
	--start 2026-11-29T18:10:00Z --period-s 30)
"$bin/meterctl" simulate --push "$base/v1/samples" --token "$token" "${sim_args[@]}" \
	--speed 100 >"$work/sim.log" 2>&1 &
sims=($!)
"$bin/meterctl" simulate --push "http://127.0.0.1:$refport/v1/samples" --token "$token" \
	"${sim_args[@]}" --speed 0 >"$work/sim-ref.log" 2>&1 &
sims+=($!)
run_client "$work/client" &
client=$!
# The token given as a flag is overwritten in the fleet's command line
# (readable by every local user while it runs).
sleep 0.5
if tr '\0' ' ' <"/proc/${sims[0]}/cmdline" | grep -qF -- "$token"; then
	fail "the agent token is readable in meterctl simulate's command line"
else
	tr '\0' ' ' <"/proc/${sims[0]}/cmdline" | grep -q -- "--token x" && ok ||
		fail "cmdline: $(tr '\0' ' ' <"/proc/${sims[0]}/cmdline")"
fi
# A crash of the server: every process killed at once, no checkpoint; the
# next start replays the WAL.
pg_crash() {
	local d pgbin
	d=$(readlink -f "$METER_PG_DIR")
	pgbin=$(find /usr/lib/postgresql/*/bin -maxdepth 0 | sort -V | tail -1)
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u meter -- "$pgbin/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null
	else
		"$pgbin/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null
	fi
}
# Recovery without a restart: an allowed check in the client's log after
# the line count in client.at_up.
recovered() {
	awk -v n="$(wc -l <"$work/client.at_up")" \
		'NR > n && $1 == "create" && $3 == 200 {found = 1; exit} END {exit !found}' \
		"$work/client"
}
# outage NAME STOP-COMMAND...: stops the database, keeps it down 4 s (probes
# while it is down), starts it and waits until checks are allowed again.
outages=0
outage() {
	local name=$1 t0 t_up secs
	shift
	t0=$EPOCHREALTIME
	"$@"
	outages=$((outages + 1))
	echo "$name: database down in $(awk "BEGIN {printf \"%.1f\", $EPOCHREALTIME - $t0}") s"
	# While it is down: alive, not ready; events, reads and exports refused
	# quickly (checks: the client's log below).
	sleep 0.5
	expect "$name: healthz while the database is down" "$(http_status "$base/healthz")" 200
	expect "$name: readyz while the database is down" "$(http_status "$base/readyz")" 503
	down_probe "$name: stop event" /v1/sandboxes/out-0/events "$(stop_body "$(now_rfc3339)")"
	auth=kk1.$kk1_secret down_probe "$name: key read" /v1/keys/kk1 "" GET
	auth=kk1.$kk1_secret down_probe "$name: usage export" \
		"/v1/reports/usage.csv?from=2026-11-29T00:00:00Z&to=2026-12-01T00:00:00Z" "" GET
	auth=kk1.$kk1_secret down_probe "$name: usage query" /v1/usage "" GET
	sleep "$(awk "BEGIN {d = 4 - ($EPOCHREALTIME - $t0); print (d > 0 ? d : 0)}")"
	bash "$pgsh" start >/dev/null
	t_up=$EPOCHREALTIME
	cp "$work/client" "$work/client.at_up"
	wait_for 20 recovered && ok || fail "$name: checks did not recover after the database came back"
	secs=$(awk "BEGIN {printf \"%.1f\", $EPOCHREALTIME - $t_up}")
	recover_s="$recover_s ${secs}s"
	echo "$name: checks allowed again ${secs} s after the database was back"
}
# down_probe WHAT PATH BODY [METHOD]: 503 metering_unavailable within 6 s.
down_probe() {
	method=${4:-POST} auth=${auth:-} post "$2" "$3"
	expect "$1 while the database is down" "$st $code" "503 metering_unavailable"
	awk "BEGIN {exit !($secs < 6)}" && ok || fail "$1 took $secs s while the database was down"
}
recover_s=
sleep 2.5
outage "fast shutdown" bash "$pgsh" stop
sleep 1.5
outage "crash" pg_crash
kill -0 "$pid" && ok || fail "meterd died during the outage"
wait "${sims[0]}" || fail "simulator failed: $(tail -3 "$work/sim.log")"
wait "${sims[1]}" || fail "reference simulator failed: $(tail -3 "$work/sim-ref.log")"
sims=()
sleep 1
touch "$work/client.stop"
wait "$client" || true
client=

# What the client saw: answers only 200, 402 or 503 metering_unavailable,
# each within 6 s; refusals during the outage, allowed checks around it.
expect "statuses other than 200, 402, 503" \
	"$(awk '$3 != 200 && $3 != 402 && $3 != 503' "$work/client" | head -3)" ""
expect "a 503 that is not metering_unavailable" \
	"$(awk '$3 == 503 && $5 != "metering_unavailable"' "$work/client" | head -3)" ""
expect "answers slower than 6 s" "$(awk '$4 >= 6' "$work/client" | head -3)" ""
n503=$(awk '$3 == 503' "$work/client" | wc -l)
n200=$(awk '$3 == 200' "$work/client" | wc -l)
slowest=$(awk 'BEGIN {m = 0} $3 == 503 && $4 > m {m = $4} END {print m}' "$work/client")
echo "client: $(wc -l <"$work/client") requests, $n200 answered 200, $n503 answered 503" \
	"(slowest 503 in ${slowest} s)"
((n503 >= 5)) && ok || fail "the outage was not seen ($n503 503s)"
grep -q "checks: database connection lost" "$work/meterd.log" && ok ||
	fail "no log line for the lost connection"
grep -q "checks: database connected" "$work/meterd.log" && ok ||
	fail "no log line for the reconnection"
sim_retries=$(sed -n 's/.* \([0-9][0-9]*\) retries).*/\1/p' "$work/sim.log" | tail -1)
[[ ${sim_retries:-0} -gt 0 ]] && ok || fail "no simulator POST was retried: the outage missed it"

# The client retries what got no decision (same idempotency key, same event
# time): a check whose COMMIT landed before the connection died gets its
# stored answer, any other is decided now.
while read -r what i st _ _ at; do
	[[ $st == 503 || $st == 000 ]] || continue
	if [[ $what == create ]]; then
		retry /v1/checks/create "$(create_body "$i")" || fail "create $i: no answer after the outage"
		echo "create $i $st $secs $code" >>"$work/client.final"
		if [[ $st == 200 ]] && ((i % 3 == 0)); then
			at=$(now_rfc3339)
			retry "/v1/sandboxes/out-$i/events" "$(stop_body "$at")"
			echo "stop $i $st $secs $code $at" >>"$work/client.final"
		fi
	else
		retry "/v1/sandboxes/out-$i/events" "$(stop_body "$at")" ||
			fail "stop $i: no answer after the outage"
		echo "stop $i $st $secs $code $at" >>"$work/client.final"
	fi
done <"$work/client"
touch "$work/client.final"
# The last answer per request.
final() {
	cat "$work/client" "$work/client.final" |
		awk '{last[$1 " " $2] = $3} END {for (k in last) print k, last[k]}' | LC_ALL=C sort
}
expect "a request still without a decision" "$(final | awk '$3 == 503 || $3 == 000')" ""
expect "check sandboxes = allowed creates" \
	"$(sql "SELECT sandbox_id FROM sandboxes WHERE account_id = 'acct_k' ORDER BY 1")" \
	"$(final | awk '$1 == "create" && $3 == 200 {print "out-" $2}' | LC_ALL=C sort)"
stopped_open() {
	sql "SELECT count(*) FROM holds h JOIN sandboxes s USING (account_id, sandbox_id)
	  WHERE s.state = 'stopped' AND h.status = 'open'"
}
expect "stopped sandboxes hold only their unmetered tail" "$(sql "SELECT count(*) FROM holds h
  JOIN sandboxes s USING (account_id, sandbox_id) WHERE s.state = 'stopped'
  AND h.status = 'open' AND h.settles_at IS DISTINCT FROM s.state_since")" 0
no_stopped_open() { [[ $(stopped_open) == 0 ]]; }
wait_for 10 no_stopped_open
expect "stopped sandboxes have no open hold (tails released after the grace)" \
	"$(stopped_open)" 0
expect "stopped sandboxes = stop events answered" \
	"$(sql "SELECT count(*) FROM sandboxes WHERE account_id = 'acct_k' AND state = 'stopped'")" \
	"$(final | awk '$1 == "stop" && $3 == 200' | wc -l)"
ledger_invariants "after the outage"
expect "ingestion = the uninterrupted run's" "$(ingest_digest "$own_url")" \
	"$(ingest_digest "$ref_url")"
[[ $(sql "SELECT count(*) FROM samples") -gt 0 ]] && ok || fail "nothing ingested"
kill -TERM "$refpid"
wait "$refpid" || fail "reference meterd did not stop cleanly"
refpid=

# ---- 2. statement timeout -------------------------------------------------------------
# A transaction of ours holds key_day_ledger (every check, event, ingestion
# and key read needs it) and usage_hourly (usage queries and exports) locked
# until the requests below are answered; meterd's statement timeout is 1 s.
hx_doc() { # N: the N-th document of host hx, two sandboxes of kc1, 60 s apart
	local t
	t=$(date -u -d "2026-11-29T22:00:00Z + $(($1 * 60)) seconds" +%Y-%m-%dT%H:%M:%SZ)
	echo "{\"host_id\":\"hx\",\"sampled_at\":\"$t\",\"sandboxes\":[" \
		"{\"sandbox_id\":\"sbx-x1\",\"key_id\":\"kc1\",\"state\":\"running\",\"vcpus\":2,\"memory_mib\":2048,\"cpu_usec\":$(($1 * 30000000))}," \
		"{\"sandbox_id\":\"sbx-x2\",\"key_id\":\"kc1\",\"state\":\"running\",\"vcpus\":1,\"memory_mib\":1024,\"cpu_usec\":$(($1 * 1000000))}]}"
}
auth=
post /v1/samples "$(hx_doc 0)"
expect "first hx document" "$st" 200
coproc locker { psql "$own_url" -Atq -v ON_ERROR_STOP=1 >/dev/null; }
lock_fd=${locker[1]}
# shellcheck disable=SC2154 # locker_PID: set by coproc
locker_pid=$locker_PID
echo "BEGIN; LOCK TABLE key_day_ledger, usage_hourly IN ACCESS EXCLUSIVE MODE;" >&"$lock_fd"
locked() {
	[[ $(sql "SELECT count(*) FROM pg_locks WHERE relation = 'key_day_ledger'::regclass
	  AND mode = 'AccessExclusiveLock' AND granted") == 1 ]]
}
wait_for 5 locked || fail "the test's lock was not taken"
lines_before=$(wc -l <"$work/meterd.log")
n_to=0
# timed WHAT PATH BODY: a request under the lock: 503 metering_unavailable
# within the statement timeout plus slack (5 s).
timed() {
	max_time=10 post "$2" "$3"
	expect "$1 under a statement timeout" "$st $code" "503 metering_unavailable"
	awk "BEGIN {exit !($secs < 5)}" && ok || fail "$1 took $secs s under a statement timeout"
	[[ $body == '{"error":{"code":"metering_unavailable","message":'* ]] && ok ||
		fail "$1: not a JSON error: $body"
	n_to=$((n_to + 1))
}
timed "create check" /v1/checks/create "$(create_body 9001 kk2)"
timed "stop event" /v1/sandboxes/sbx-x1/events "$(stop_body "$(now_rfc3339)")"
timed "ingestion" /v1/samples "$(hx_doc 1)"
auth=kk1.$kk1_secret method=GET timed "key read" /v1/keys/kk1 ""
auth=kk1.$kk1_secret method=GET timed "usage query" /v1/usage ""
auth=kk1.$kk1_secret method=GET timed "sandbox list" /v1/sandboxes ""
auth=kk1.$kk1_secret method=GET timed "statement" "/v1/reports/statement.csv?month=2026-11" ""
auth=kk1.$kk1_secret method=GET timed "usage export" \
	"/v1/reports/usage.csv?from=2026-11-29T00:00:00Z&to=2026-12-01T00:00:00Z" ""
kill -0 "$pid" && ok || fail "meterd died under a statement timeout"
sed -n "$((lines_before + 1)),\$p" "$work/meterd.log" >"$work/timeout.log"
grep -qE 'statement timeout|57014' "$work/timeout.log" && ok ||
	fail "no log line names the statement timeout"
grep -E 'statement timeout|57014' "$work/timeout.log" | head -3
echo "COMMIT;" >&"$lock_fd"
exec {lock_fd}>&-
wait "$locker_pid" || fail "the test's locking transaction failed"
# The lock is gone: the same requests now succeed.
post /v1/checks/create "$(create_body 9001 kk2)"
expect "create check after the lock" "$st" 200
post /v1/samples "$(hx_doc 1)"
expect "ingestion after the lock" "$st" 200
auth=kk1.$kk1_secret method=GET post /v1/keys/kk1 ""
expect "key read after the lock" "$st" 200
auth=kk1.$kk1_secret method=GET post \
	"/v1/reports/usage.csv?from=2026-11-29T00:00:00Z&to=2026-12-01T00:00:00Z" ""
expect "usage export after the lock" "$st" 200
ledger_invariants "after the statement timeout"

# ---- 3. full disk -----------------------------------------------------------------------
disk=skipped
if [[ $(id -u) -ne 0 ]]; then
	echo "SKIP full disk: mounting a tmpfs needs root"
else
	tiny=$work/tiny
	mkdir -p "$tiny"
	if ! mount -t tmpfs -o size=2m,mode=0700 tmpfs "$tiny" 2>"$work/mount.err"; then
		echo "SKIP full disk: cannot mount a tmpfs here: $(cat "$work/mount.err")"
		tiny=
	fi
fi
if [[ -n $tiny ]]; then
	chown meter "$tiny"
	# The holds, the hourly rollups and the samples of the day go to a
	# tablespace of 2 MiB; fillfactor 10 makes every few rows need a new page.
	sql "CREATE TABLESPACE tiny LOCATION '$tiny'" >/dev/null
	sql "ALTER TABLE holds SET (fillfactor = 10); ALTER TABLE holds SET TABLESPACE tiny;
	  ALTER TABLE usage_hourly SET (fillfactor = 10); ALTER TABLE usage_hourly SET TABLESPACE tiny;
	  ALTER TABLE samples_20261129 SET (fillfactor = 10);
	  ALTER TABLE samples_20261129 SET TABLESPACE tiny" >/dev/null
	# Then nothing is left.
	dd if=/dev/zero of="$tiny/filler" bs=4k 2>/dev/null || true
	echo "tablespace on tmpfs: $(df -k --output=avail "$tiny" | tail -1) KiB free"
	lines_before=$(wc -l <"$work/meterd.log")
	# Checks until one needs a page (at most 40): a 503, never a 500.
	full_at=
	for i in $(seq 9100 9140); do
		post /v1/checks/create "$(create_body "$i" kk2)"
		case $st in
		200) ;;
		503)
			full_at=$i
			break
			;;
		*)
			fail "create check on a full disk: $st $body"
			break
			;;
		esac
	done
	[[ -n $full_at ]] && ok || fail "no check met the full disk"
	expect "check on a full disk" "$code" metering_unavailable
	# Ingestion: documents until one needs a page.
	ing_full=
	for n in $(seq 2 40); do
		post /v1/samples "$(hx_doc "$n")"
		case $st in
		200) ;;
		503)
			ing_full=$n
			break
			;;
		*)
			fail "ingestion on a full disk: $st $body"
			break
			;;
		esac
	done
	[[ -n $ing_full ]] && ok || fail "no document met the full disk"
	kill -0 "$pid" && ok || fail "meterd died on a full disk"
	sed -n "$((lines_before + 1)),\$p" "$work/meterd.log" >"$work/disk.log"
	grep -qE 'No space left on device|53100' "$work/disk.log" && ok ||
		fail "no log line names the full disk"
	grep -E 'No space left on device|53100' "$work/disk.log" | head -3
	ledger_invariants "on a full disk"
	# Space returns: the same requests succeed, the rest follows.
	rm -f "$tiny/filler"
	retry /v1/checks/create "$(create_body "$full_at" kk2)"
	expect "the refused check once space is back" "$st" 200
	for n in $(seq "$ing_full" $((ing_full + 3))); do
		retry /v1/samples "$(hx_doc "$n")"
		expect "document $n once space is back" "$st" 200
	done
	ledger_invariants "after the full disk"
	expect "hx ingested in full" "$(sql "SELECT count(*) FROM samples WHERE host_id = 'hx'")" \
		$(((ing_full + 4) * 2))
	disk="a check refused at try $((full_at - 9099)), a document at try $((ing_full - 1))"
	# Back to the default tablespace before the mount goes.
	sql "ALTER TABLE holds SET TABLESPACE pg_default; ALTER TABLE usage_hourly SET TABLESPACE
	  pg_default; ALTER TABLE samples_20261129 SET TABLESPACE pg_default" >/dev/null
	sql "DROP TABLESPACE tiny" >/dev/null
fi

# meterd went through it all without a restart.
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
expect "meterd exit status after SIGTERM" "$status" 0
expect "no 5xx but 503 in meterd's access log" \
	"$(grep -E 'status=5[0-9][0-9]' "$work/meterd.log" | grep -v 'status=503' | head -3)" ""
expect "no sanitizer report" \
	"$(grep -c -E 'AddressSanitizer|runtime error|LeakSanitizer' "$work/meterd.log")" 0
echo "faults: $outages outages (${n503} checks answered 503, recovered in${recover_s})," \
	"$n_to requests under a statement timeout, full disk: $disk"
bash "$pgsh" destroy
unmount_tiny
[[ $failed -eq 0 && -z ${METER_TEST_KEEP:-} ]] && rm -rf "$work"
finish

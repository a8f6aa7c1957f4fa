#!/usr/bin/env bash
# Two meterd on one database with different lease_grace_s and
# sample_retention_days (a rolling change of them) sweep with the settings
# in force there (sql/0063): the largest grace and the longest retention of
# the processes running, each process's refreshed every 10 s and gone at
# its clean stop, forgotten 15 minutes after its last refresh otherwise.
#
# The money case: a key with budget for one lease. A sandbox never sampled
# is paused, keeping its whole run as a tail hold until a sample or the
# grace; a process with grace 0 beside one with 300 swept that tail away at
# once, a second create took the budget, and the first one's late sample
# was spent on no hold, taking the day past its limit. Now the tail stays
# held (300 s in force) and the second create is refused, until the process
# with 300 stops: then the grace in force is 0 and the tail goes.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
work=$bin/test-sweep-shared-$$
mkdir -p "$work"
pid_a=
pid_b=

stop_all() {
	for p in $pid_a $pid_b; do kill -0 "$p" 2>/dev/null && kill -KILL "$p"; done
	return 0
}
cleanup_fns+=(stop_all)

url=$(make_db sweep_shared)
cleanup_fns+=("drop_db sweep_shared")
"$bin/meterctl" migrate --database-url "$url" >/dev/null 2>&1 || fail "migrate"
export METER_DATABASE_URL=$url
export METER_OPERATOR_TOKEN=op-shared-0123456789abcdefghijklmnop
export METER_CONTROL_PLANE_TOKEN=cp-shared-0123456789abcdefghijklmnop

# start NAME ARGS...: starts meterd on a free port; sets pid and port.
start() {
	local name=$1
	shift
	port=$(free_port)
	"$bin/meterd" --listen "127.0.0.1:$port" --collector off "$@" >"$work/$name.log" 2>&1 &
	pid=$!
	wait_for 10 curl -fs "http://127.0.0.1:$port/readyz" || fail "$name did not start"
}
sweepers() { psql "$url" -Atq -c "SELECT count(*) FROM meterd_sweepers"; }
sweepers_are() { [[ $(sweepers) == "$1" ]]; }

# B first (grace 300, samples kept for ever), seen on the database before A
# (grace 0, a day of samples) starts: A reads B's settings at its first sweep.
start b --lease-grace-s 300 --sample-retention-days 0
pid_b=$pid port_b=$port
wait_for 10 sweepers_are 1 || fail "b's settings not recorded"
start a --lease-grace-s 0 --sample-retention-days 1
pid_a=$pid port_a=$port
wait_for 10 grep -q "lease_grace_s in force is 300 s (this process's: 0 s)" "$work/a.log" && ok ||
	fail "a did not log the grace in force: $(cat "$work/a.log")"
grep -q "sample_retention_days in force is 0 (this process's: 1; 0: for ever)" "$work/a.log" &&
	ok || fail "a did not log the retention in force"
expect "rows of the two sweepers" "$(sweepers)" 2

api() { # api PORT TOKEN METHOD PATH [BODY]: prints "STATUS BODY"
	local out
	out=$(curl -s -w '\n%{http_code}' -X "$3" -H "Authorization: Bearer $2" \
		-H 'Content-Type: application/json' ${5:+--data "$5"} "http://127.0.0.1:$1$4")
	echo "${out##*$'\n'} ${out%$'\n'*}"
}
r=$(api "$port_a" "$METER_OPERATOR_TOKEN" POST /v1/accounts '{"name":"Shared"}')
acc=$(jq -r .account_id <<<"${r#* }")
# 4 vCPU, 16 GiB for 600 s: a worst case of 36,667 µ$; the day holds 100
# more, so a tail of 2 s (its share of the hold, about 123 µ$) leaves too
# little for a second one.
# At its midday: the leases are not split at a midnight, whatever the hour.
r=$(api "$port_a" "$METER_OPERATOR_TOKEN" POST "/v1/accounts/$acc/keys" \
	"{\"role\":\"full\",\"daily_limit_micros\":36767,\"time_zone\":\"$(midday_zone)\"}")
key=$(jq -r .key_id <<<"${r#* }")
create() { # create PORT SANDBOX: the status
	api "$1" "$METER_CONTROL_PLANE_TOKEN" POST /v1/checks/create \
		"{\"key_id\":\"$key\",\"sandbox_id\":\"$2\",\"vcpus\":4,\"memory_mib\":16384,\"lease_seconds\":600}" |
		cut -d' ' -f1
}
event() { # event PORT SANDBOX TYPE: the status
	api "$1" "$METER_CONTROL_PLANE_TOKEN" POST "/v1/sandboxes/$2/events" \
		"{\"type\":\"$3\",\"at\":\"$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)\"}" | cut -d' ' -f1
}
open_holds() { psql "$url" -Atq -c "SELECT count(*) FROM holds WHERE sandbox_id = '$1' AND status = 'open'"; }
open_holds_are() { [[ $(open_holds "$1") == "$2" ]]; }
expect "create x on b" "$(create "$port_b" x)" 200
expect "x running" "$(event "$port_b" x running)" 200
sleep 2
# Paused on A, whose own grace is 0: settled with the grace in force.
expect "x paused on a" "$(event "$port_a" x paused)" 200
sleep 4 # four of A's sweeps, each of which closed the tail with grace 0
expect "x's tail hold, 4 s after the pause" "$(open_holds x)" 1
expect "create y beside x's tail" "$(create "$port_b" y)" 402
committed=$(psql "$url" -Atq -c "SELECT spent_micros + held_micros FROM key_day_ledger WHERE key_id = '$key'")
((committed <= 36767)) && ok || fail "committed $committed past the limit 36767"
# Every row an hour old, as after a long outage of the database, and B
# held back (SIGSTOP) until A has recorded again: A, finding its own
# record that old, forgets no other, and keeps B's grace in force until B
# records again; x's tail stays held. (A forgetting B then released it.)
psql "$url" -Atq -c "UPDATE meterd_sweepers SET seen_at = seen_at - interval '1 hour'" >/dev/null
kill -STOP "$pid_b"
recent() { [[ $(psql "$url" -Atq -c "SELECT count(*) FROM meterd_sweepers
	WHERE seen_at > now() - interval '1 minute'") == "$1" ]]; }
wait_for 15 recent 1 || fail "a did not record again"
sleep 2 # two of A's sweeps
kill -CONT "$pid_b"
wait_for 15 recent 2 || fail "b did not record again"
expect "rows after an outage's lapse" "$(sweepers)" 2
expect "x's tail hold after an outage's lapse" "$(open_holds x)" 1
expect "create y after an outage's lapse" "$(create "$port_b" y)" 402

# B stops cleanly: its row goes, and within A's next refresh (10 s) the
# grace in force is A's 0, and x's tail, never sampled, is released.
kill -TERM "$pid_b"
wait "$pid_b" || fail "b did not stop cleanly"
pid_b=
expect "rows once b stopped" "$(sweepers)" 1
wait_for 15 grep -q "lease_grace_s in force is 0 s (this process's: 0 s)" "$work/a.log" && ok ||
	fail "a did not take the grace back"
wait_for 5 open_holds_are x 0 && ok || fail "x's tail hold not released at grace 0"
expect "create y once x's tail went" "$(create "$port_a" y)" 200

kill -TERM "$pid_a"
wait "$pid_a" || fail "a did not stop cleanly"
pid_a=
expect "rows once both stopped" "$(sweepers)" 0
finish

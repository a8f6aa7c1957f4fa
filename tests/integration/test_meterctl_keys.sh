#!/usr/bin/env bash
# meterctl account create / key create / key revoke: the printed token
# works against a real meterd, is shown once, and bad arguments exit 2; a
# revoked key stops authenticating within meterd's 5 s cache, checks naming
# it are refused while its hold stands, and revoking needs the right
# account and changes nothing the second time.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
work=$bin/test-meterctl-keys-$$
mkdir -p "$work"
pid=
stop_meterd() {
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
	pid=
}
cleanup_fns+=(stop_meterd "rm -rf $work")

url=$(make_db ctlkeys)
cleanup_fns+=("drop_db ctlkeys")
"$bin/meterctl" migrate --database-url "$url" >/dev/null

acc_json=$("$bin/meterctl" account create --name "Acme" --database-url "$url")
acc=$(jq -r .account_id <<<"$acc_json")
[[ $acc =~ ^acc_[0-9a-f]{16}$ ]] && ok || fail "account id: $acc_json"
expect "account name" "$(jq -r .name <<<"$acc_json")" "Acme"

key_json=$(METER_DATABASE_URL=$url "$bin/meterctl" key create --account "$acc" --role read_only \
	--daily-limit-micros 5000000 --time-zone Europe/Paris)
key=$(jq -r .key_id <<<"$key_json")
token=$(jq -r .secret <<<"$key_json")
[[ $token =~ ^${key}\.[A-Za-z0-9_-]{43}$ ]] && ok || fail "token shape: $key_json"
expect "role" "$(jq -r .role <<<"$key_json")" read_only
expect "limit" "$(jq -r .daily_limit_micros <<<"$key_json")" 5000000
expect "time zone" "$(jq -r .time_zone <<<"$key_json")" Europe/Paris
expect "secret not stored" "$(psql "$url" -Atq -c "SELECT count(*) FROM api_keys WHERE
	position('${token#*.}' IN encode(secret_hash, 'escape')) > 0")" 0

# Bad arguments: exit 2, one line on stderr, nothing created.
status() { "$@" >/dev/null 2>"$work/err" && echo 0 || echo $?; }
export METER_DATABASE_URL=$url
expect "no --role" "$(status "$bin/meterctl" key create --account "$acc")" 2
expect "bad role" "$(status "$bin/meterctl" key create --account "$acc" --role admin)" 2
expect "negative limit" "$(status "$bin/meterctl" key create --account "$acc" --role full \
	--daily-limit-micros -1)" 2
expect "overflowing limit" "$(status "$bin/meterctl" key create --account "$acc" --role full \
	--daily-limit-micros 9223372036854775808)" 2
expect "unknown zone" "$(status "$bin/meterctl" key create --account "$acc" --role full \
	--time-zone Mars/Base)" 2
expect "bad account id" "$(status "$bin/meterctl" key create --account 'a b' --role full)" 2
expect "no such account" "$(status "$bin/meterctl" key create --account acc_nope --role full)" 1
expect "the unattributed account" "$(status "$bin/meterctl" key create --account unattributed \
	--role read_only)" 2
expect "no name" "$(status "$bin/meterctl" account create)" 2
# A value beginning with "--", after the flag or after '=', alike.
expect "name --x" "$(status "$bin/meterctl" account create --name --x)" 2
expect "name=--x" "$(status "$bin/meterctl" account create --name=--x)" 2
grep -q "a value may not begin with --" "$work/err" && ok || fail "message: $(cat "$work/err")"
expect "bad verb" "$(status "$bin/meterctl" key delete)" 2
expect "keys stored" "$(psql "$url" -Atq -c "SELECT count(*) FROM api_keys")" 1
# A result that cannot be written is not made: the key's secret would be
# lost with it (and an account made for nothing).
expect "key create, stdout full" "$("$bin/meterctl" key create --account "$acc" --role full \
	>/dev/full 2>"$work/err"; echo $?)" 1
grep -q "nothing was created" "$work/err" && ok || fail "message: $(cat "$work/err")"
expect "account create, stdout full" "$("$bin/meterctl" account create --name Lost \
	>/dev/full 2>/dev/null; echo $?)" 1
# Standard output closed (the database's connection would take its
# descriptor, and the secret would go there), or a reader that has gone
# (a broken pipe, not a silent death by SIGPIPE): refused, nothing made.
expect "key create, stdout closed" "$("$bin/meterctl" key create --account "$acc" --role full \
	>&- 2>"$work/err"; echo $?)" 1
grep -q "standard output is closed" "$work/err" && ok || fail "message: $(cat "$work/err")"
# (A pipe whose reader has gone before the write, whatever the timing: a
# FIFO opened for reading and writing, then for writing, then its reading
# side closed.)
mkfifo "$work/fifo"
exec {rw}<>"$work/fifo"
exec {wo}>"$work/fifo"
exec {rw}<&-
"$bin/meterctl" key create --account "$acc" --role full >&"$wo" 2>"$work/err" && st=0 || st=$?
exec {wo}>&-
expect "key create, reader gone" "$st" 1
grep -q "nothing was created" "$work/err" && ok || fail "message: $(cat "$work/err")"
expect "nothing made" "$(psql "$url" -Atq -c "SELECT (SELECT count(*) FROM api_keys),
	(SELECT count(*) FROM accounts WHERE name = 'Lost')")" "1|0"
# A name is up to 200 characters, not bytes, as the API counts it.
long=$(printf 'é%.0s' $(seq 200))
expect "a 200-character name" "$("$bin/meterctl" account create --name "$long" | jq -r '.name | length')" 200
expect "a 201-character name" "$(status "$bin/meterctl" account create --name "${long}é")" 2
expect "a C1 control in the name" "$(status "$bin/meterctl" account create --name "$(printf 'a\302\205b')")" 2
expect "a name not UTF-8" "$(status "$bin/meterctl" account create --name "$(printf 'a\351b')")" 2
# Revoking: the right account or nothing; bad arguments exit 2.
fkey=$("$bin/meterctl" key create --account "$acc" --role full | jq -r .key_id)
acc2=$("$bin/meterctl" account create --name Other | jq -r .account_id)
key2=$("$bin/meterctl" key create --account "$acc2" --role full | jq -r .key_id)
expect "revoke without --key" "$(status "$bin/meterctl" key revoke --account "$acc")" 2
expect "revoke a bad key id" "$(status "$bin/meterctl" key revoke --account "$acc" \
	--key "$key/x")" 2
expect "revoke another account's key" "$(status "$bin/meterctl" key revoke --account "$acc" \
	--key "$key2")" 1
grep -q "no key $key2 in account $acc" "$work/err" && ok || fail "message: $(cat "$work/err")"
expect "revoke no such key" "$(status "$bin/meterctl" key revoke --account "$acc" \
	--key key_0000000000000000)" 1
expect "nothing revoked" "$(psql "$url" -Atq -c "SELECT count(*) FROM api_keys
	WHERE revoked_at IS NOT NULL")" 0
unset METER_DATABASE_URL
expect "no database" "$(status "$bin/meterctl" account create --name x)" 2
expect "a database URL libpq cannot read" "$(status "$bin/meterctl" key create --account "$acc" \
	--role full --database-url 'postgresql://u:pw@[bad')" 2
grep -q "pw" "$work/err" && fail "the URL echoed: $(cat "$work/err")" || ok
expect "a database URL with an sslmode libpq does not take" "$(status "$bin/meterctl" key create \
	--account "$acc" --role full --database-url 'postgresql://u:pw@127.0.0.1/db?sslmode=on')" 2
grep -q "sslmode" "$work/err" && ok || fail "sslmode not named: $(cat "$work/err")"
grep -q "pw" "$work/err" && fail "the URL echoed: $(cat "$work/err")" || ok
expect "revoke, no database" "$(status "$bin/meterctl" key revoke --account "$acc" \
	--key "$key")" 2

# The token authenticates against meterd; it may read, not write.
port=$(free_port)
cp=cp-$$-secret-0123456789abcdefghijklmn
METER_DATABASE_URL=$url METER_OPERATOR_TOKEN=op-$$-secret-0123456789abcdefghijklmn METER_CONTROL_PLANE_TOKEN=$cp \
	"$bin/meterd" --listen "127.0.0.1:$port" >"$work/meterd.log" 2>&1 &
pid=$!
base=http://127.0.0.1:$port
wait_for 10 curl -fs "$base/readyz" || { cat "$work/meterd.log" >&2; fail "meterd did not start"; }
body=$(curl -s -H "Authorization: Bearer $token" "$base/v1/keys/$key")
expect "GET own key" "$(jq -r .key_id <<<"$body")" "$key"
expect "limit via API" "$(jq -r .daily_limit_micros <<<"$body")" 5000000
expect "read_only may not write" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
	-H "Authorization: Bearer $token" -d '{"daily_limit_micros":1}' \
	"$base/v1/keys/$key/limits")" 403

# Revoked: the token stops working (each meterd forgets a cached lookup
# within 5 s), checks naming a revoked key are refused, and a hold given
# before stands (its check's retry gets the stored answer).
check() {
	curl -s -o "$work/check" -w '%{http_code}' -H "Authorization: Bearer $cp" \
		-H 'Content-Type: application/json' \
		-d "{\"key_id\":\"$fkey\",\"sandbox_id\":\"$1\",\"vcpus\":1,\"memory_mib\":1024,\"lease_seconds\":60}" \
		"$base/v1/checks/create"
}
expect "check before the revocation" "$(check rv-1)" 200
rv=$("$bin/meterctl" key revoke --account "$acc" --key "$key" --database-url "$url")
expect "revoked" "$(jq -r '[.key_id, .account_id, .role, .already_revoked] | join(" ")' \
	<<<"$rv")" "$key $acc read_only false"
first=$(jq -r .revoked_at <<<"$rv")
[[ $first =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T ]] && ok || fail "revoked_at: $rv"
# A result that cannot be written after the revocation committed says the
# key is revoked all the same.
expect "revoke again, stdout full" "$("$bin/meterctl" key revoke --account "$acc" --key "$key" \
	--database-url "$url" >/dev/full 2>"$work/err"; echo $?)" 1
grep -q "the key is revoked, but cannot write the result" "$work/err" && ok ||
	fail "message: $(cat "$work/err")"
rv=$("$bin/meterctl" key revoke --account "$acc" --key "$key" --database-url "$url")
expect "revoked again: nothing changes" "$(jq -r '[.already_revoked, .revoked_at] | join(" ")' \
	<<<"$rv")" "true $first"
refused() {
	[[ $(http_status -H "Authorization: Bearer $token" "$base/v1/keys/$key") == 401 ]]
}
wait_for 7 refused && ok || fail "the revoked key still authenticates after 7 s"
expect "the other account's key untouched" "$(psql "$url" -Atq -c "SELECT revoked_at IS NULL
	FROM api_keys WHERE key_id = '$key2'")" t
"$bin/meterctl" key revoke --account "$acc" --key "$fkey" --database-url "$url" >/dev/null &&
	ok || fail "revoke the full key"
expect "retry of a check answered before" "$(check rv-1)" 200
expect "new check on the revoked key" "$(check rv-2)" 403
expect "its code" "$(jq -r .error.code "$work/check")" key_revoked
expect "the hold stands" "$(psql "$url" -Atq -c "SELECT count(*) FROM holds
	WHERE key_id = '$fkey' AND status = 'open'")" 1
kill -TERM "$pid"
wait "$pid" || true
pid=
grep -q -- "${token#*.}" "$work/meterd.log" && fail "secret in the log" || ok
finish

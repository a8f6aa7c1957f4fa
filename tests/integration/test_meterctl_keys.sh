#!/usr/bin/env bash
# meterctl account create / key create: the printed token works against a
# real meterd, is shown once, and bad arguments exit 2.
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
expect "no name" "$(status "$bin/meterctl" account create)" 2
expect "bad verb" "$(status "$bin/meterctl" key delete)" 2
expect "keys stored" "$(psql "$url" -Atq -c "SELECT count(*) FROM api_keys")" 1
unset METER_DATABASE_URL
expect "no database" "$(status "$bin/meterctl" account create --name x)" 2

# The token authenticates against meterd; it may read, not write.
port=$(free_port)
METER_DATABASE_URL=$url METER_OPERATOR_TOKEN=op-$$-secret "$bin/meterd" \
	--listen "127.0.0.1:$port" >"$work/meterd.log" 2>&1 &
pid=$!
base=http://127.0.0.1:$port
wait_for 10 curl -fs "$base/readyz" || { cat "$work/meterd.log" >&2; fail "meterd did not start"; }
body=$(curl -s -H "Authorization: Bearer $token" "$base/v1/keys/$key")
expect "GET own key" "$(jq -r .key_id <<<"$body")" "$key"
expect "limit via API" "$(jq -r .daily_limit_micros <<<"$body")" 5000000
expect "read_only may not write" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
	-H "Authorization: Bearer $token" -d '{"daily_limit_micros":1}' \
	"$base/v1/keys/$key/limits")" 403
kill -TERM "$pid"
wait "$pid" || true
pid=
grep -q -- "${token#*.}" "$work/meterd.log" && fail "secret in the log" || ok
finish

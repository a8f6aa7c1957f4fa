# Shared helpers for the script tests. Sourced, not run.
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
bin=${METER_BIN_DIR:?METER_BIN_DIR not set}
admin_url=$(cat "${METER_TEST_PG_URL_FILE:?METER_TEST_PG_URL_FILE not set}")
passed=0
failed=0
cleanup_fns=()

ok() { passed=$((passed + 1)); }
fail() {
	failed=$((failed + 1))
	echo "FAIL: $*" >&2
}
# expect WHAT GOT WANT
expect() { if [[ "$2" == "$3" ]]; then ok; else fail "$1: got '$2', want '$3'"; fi; }
finish() {
	echo "$passed passed, $failed failed"
	[[ $failed -eq 0 && $passed -gt 0 ]]
}
on_exit() { for f in "${cleanup_fns[@]}"; do $f || true; done; }
trap on_exit EXIT

# A throwaway database in the test cluster; prints its URL.
make_db() {
	local name=t_${1}_$$
	psql "$admin_url" -Atq -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
	echo "${admin_url%/*}/$name"
}
drop_db() { psql "$admin_url" -Atq -c "DROP DATABASE IF EXISTS t_${1}_$$ WITH (FORCE)" >/dev/null; }

# usage_hourly as digest lines, every column but the write time: the crash,
# chaos and outage suites put it first in the digests they compare.
usage_digest_rows="SELECT format('u %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s',
	    account_id, sandbox_id, hour, price_version, key_id, day, running_usec, paused_usec,
	    cpu_used_mcus, cpu_billed_mcus, memory_mibus, storage_mibus, cpu_micros,
	    memory_micros, storage_micros, total_micros, cpu_cum_micros, memory_cum_micros,
	    storage_cum_micros) AS x FROM usage_hourly"

# A free TCP port on 127.0.0.1, below the kernel's ephemeral range: there no
# outgoing connection can take it between this probe and the server's bind.
free_port() {
	local low p
	low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	((low > 12000)) || low=32768
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (low - 10000)))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	return 1
}

# wait_for SECONDS COMMAND...: retries COMMAND every 0.1 s.
wait_for() {
	local n=$(($1 * 10))
	shift
	for _ in $(seq "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

# http_status URL: the status code of a GET.
http_status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@"; }

# A fixed zone at whose offset it is now 12:00 to 13:00 (Etc/GMT's sign is
# the other way round): no lease of a few hours taken now crosses a key's
# midnight in it (one that did would hold each day's part apart), whatever
# the hour a test runs at.
midday_zone() {
	local ahead=$((12 - 10#$(date -u +%H)))
	if ((ahead == 0)); then echo Etc/GMT; else printf 'Etc/GMT%+d\n' $((-ahead)); fi
}

#!/usr/bin/env bash
# meterctl as a user runs it: the pricing commands' exact figures, bad
# arguments, and migrate on a fresh database (twice).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
ctl=$bin/meterctl

expect "idle 2/4096 1h" "$($ctl price --vcpus 2 --memory-mib 4096 --seconds 3600)" \
	'{"cpu_micros":1250,"memory_micros":30000,"storage_micros":0,"total_micros":31250}'
expect "busy 2/4096 1h" "$($ctl price --vcpus 2 --memory-mib 4096 --seconds 3600 --cpu-millicores 2000)" \
	'{"cpu_micros":50000,"memory_micros":30000,"storage_micros":0,"total_micros":80000}'
expect "paused 5 GiB 1h" "$($ctl price --vcpus 2 --memory-mib 4096 --seconds 3600 --paused --storage-mib 5120)" \
	'{"cpu_micros":0,"memory_micros":0,"storage_micros":500,"total_micros":500}'
expect "lease 2/4096/900" "$($ctl lease-cost --vcpus 2 --memory-mib 4096 --lease-seconds 900)" \
	'{"lease_max_cost_micros":20000}'
# Near the caps, where a period's quantities pass 2^63 (memory 1.6e7 MiB ×
# 3.2e13 µs): priced exactly all the same, each component rounded down once
# (figures from integer arithmetic of the default book's rates), and a lease
# of a check's longest with the largest sizes.
expect "7/16777215 366d" "$($ctl price --vcpus 7 --memory-mib 16777215 --seconds 31622399 --cpu-millicores 6999)" \
	'{"cpu_micros":1536980351,"memory_micros":1079377821530,"storage_micros":0,"total_micros":1080914801881}'
expect "paused 16777215 MiB 366d" "$($ctl price --vcpus 7 --memory-mib 1 --seconds 31622399 --paused --storage-mib 16777215)" \
	'{"cpu_micros":0,"memory_micros":0,"storage_micros":14391704287,"total_micros":14391704287}'
expect "lease 1023/16777215/86399" "$($ctl lease-cost --vcpus 1023 --memory-mib 16777215 --lease-seconds 86399)" \
	'{"lease_max_cost_micros":3562878587}'

# meterctl --help gives each command's real syntax: simulate has no "serve"
# or "push" word, but --listen or --push.
expect "meterctl --help on simulate" "$($ctl --help | grep '^  simulate ')" \
	"  simulate     a simulated fleet of host agents (--listen HOST:PORT serves, --push URL pushes)"

# --help takes no value: given one, it says so (as it was written).
for c in "--help=1:meterctl: --help" "-h=1:meterctl: -h" "price --help=yes:meterctl price: --help" \
	"report --help=x:meterctl report: --help" "report usage -h=:meterctl report usage: -h" \
	"key --help=1:meterctl key: --help" "simulate --help=1:meterctl simulate: --help" \
	"migrate --help=1:meterctl migrate: --help"; do
	# shellcheck disable=SC2086
	out=$($ctl ${c%%:*} 2>/tmp/meterctl-err.$$) && status=0 || status=$?
	expect "status of 'meterctl ${c%%:*}'" "$status" 2
	expect "stdout of 'meterctl ${c%%:*}'" "$out" ""
	expect "stderr of 'meterctl ${c%%:*}'" "$(cat /tmp/meterctl-err.$$)" "${c#*:} takes no value"
done
$bin/meterd --help=1 >/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
expect "status of 'meterd --help=1'" "$status" 2
expect "stderr of 'meterd --help=1'" "$(cat /tmp/meterctl-err.$$)" "meterd: option --help takes no value"
rm -f /tmp/meterctl-err.$$

# The pricing commands use no database, and look at no database setting.
expect "price with a METER_DATABASE_SCHEMA no command could take" \
	"$(METER_DATABASE_SCHEMA=Bad METER_DATABASE_URL='host=x sslmode=bogus' \
		$ctl price --vcpus 2 --memory-mib 4096 --seconds 3600 2>&1)" \
	'{"cpu_micros":1250,"memory_micros":30000,"storage_micros":0,"total_micros":31250}'
expect "lease-cost with a METER_DATABASE_SCHEMA no command could take" \
	"$(METER_DATABASE_SCHEMA=Bad $ctl lease-cost --vcpus 2 --memory-mib 4096 --lease-seconds 900 2>&1)" \
	'{"lease_max_cost_micros":20000}'

# Bad or missing arguments: status 2, exactly one line on stderr, nothing on stdout.
bad_cases=(
	"price"
	"price --vcpus 2 --memory-mib 4096"
	"price --vcpus abc --memory-mib 4096 --seconds 3600"
	"price --vcpus 0 --memory-mib 4096 --seconds 3600"
	"price --vcpus -1 --memory-mib 4096 --seconds 3600"
	"price --vcpus 2 --memory-mib 4096 --seconds 99999999999999999999999"
	"price --vcpus 2 --memory-mib 4096 --seconds 3600 --cpu-millicores 2001"
	"price --vcpus 2 --memory-mib 4096 --seconds 3600 --bogus 1"
	"price --vcpus 2 --memory-mib 4096 --seconds"
	"price --vcpus 2 --memory-mib 4096 --seconds 1e3"
	"price --vcpus 2 --memory-mib 4096 --seconds 3600 --storage-mib 5120"
	"lease-cost --vcpus 2 --memory-mib 4096"
	"lease-cost --vcpus 2 --memory-mib -5 --lease-seconds 900"
	"lease-cost --vcpus 2 --memory-mib 4096 --lease-seconds 86401"
	"price --vcpus 2 --memory-mib 4096 --seconds 3600 --paused --storage-mib 16777217"
	"nosuchcommand"
	"migrate --database-url postgresql://127.0.0.1:1/x --database-url postgresql://127.0.0.1:1/y"
	"migrate --database-url"
	""
)
for c in "${bad_cases[@]}"; do
	# shellcheck disable=SC2086
	out=$($ctl $c 2>/tmp/meterctl-err.$$) && status=0 || status=$?
	expect "status of 'meterctl $c'" "$status" 2
	expect "stdout of 'meterctl $c'" "$out" ""
	expect "stderr lines of 'meterctl $c'" "$(wc -l </tmp/meterctl-err.$$)" 1
done
rm -f /tmp/meterctl-err.$$

# A connection string left unquoted, or a mistyped option holding a URL:
# refused without the password in the message.
secret_cases=(
	"migrate --database-url host=127.0.0.1 password=KVSECRET dbname=meter"
	"migrate --databse-url=postgresql://meter:KVSECRET@127.0.0.1/meter"
	"account create --name x --database-url host=127.0.0.1 password=KVSECRET"
	"key create --account acc_x --role full postgresql://meter:KVSECRET@127.0.0.1/meter"
)
for c in "${secret_cases[@]}"; do
	# shellcheck disable=SC2086
	$ctl $c >/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
	expect "status of 'meterctl $c'" "$status" 2
	err=$(cat /tmp/meterctl-err.$$)
	[[ $err == *KVSECRET* ]] && fail "'meterctl $c' printed the password: $err" || ok
	[[ $err == *"argument"* || $err == *"unknown option"* ]] && ok || fail "'meterctl $c' said '$err'"
done
$bin/meterd --database-url host=127.0.0.1 password=KVSECRET >/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
expect "status of meterd with an unquoted connection string" "$status" 2
[[ $(cat /tmp/meterctl-err.$$) == *KVSECRET* ]] && fail "meterd printed the password" || ok
rm -f /tmp/meterctl-err.$$

# migrate: applies on an empty database, then changes nothing.
url=$(make_db meterctl)
cleanup_fns+=("drop_db meterctl")
first=$($ctl migrate --database-url "$url" 2>/dev/null)
[[ $first == "migrated: "[1-9]*" applied"* ]] && ok || fail "first migrate said '$first'"
second=$(METER_DATABASE_URL=$url $ctl migrate 2>/dev/null)
[[ $second == "migrated: 0 applied"* ]] && ok || fail "second migrate said '$second'"
env -u METER_DATABASE_URL $ctl migrate >/dev/null 2>&1 && status=0 || status=$?
expect "migrate without a database" "$status" 2
$ctl migrate --database-url "postgresql://nobody@127.0.0.1:1/x" >/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
expect "migrate against a closed port" "$status" 1
# A URL no connection can succeed with is a bad argument, as for the
# other commands, and its password is not shown.
$ctl migrate --database-url "postgresql://nobody:PWSECRET@127.0.0.1:1/x?sslmode=bogus" \
	>/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
expect "migrate with an sslmode libpq does not take" "$status" 2
grep -q "sslmode" /tmp/meterctl-err.$$ && ok || fail "sslmode not named: $(cat /tmp/meterctl-err.$$)"
grep -q PWSECRET /tmp/meterctl-err.$$ && fail "the password shown" || ok
rm -f /tmp/meterctl-err.$$

# Reports of an account that does not exist: status 1 and one line, never
# an empty report that looks like an idle account.
for c in "report usage --account acc_none --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z" \
	"report statement --account acc_none --month 2026-11"; do
	# shellcheck disable=SC2086
	out=$($ctl $c --database-url "$url" 2>/tmp/meterctl-err.$$) && status=0 || status=$?
	expect "status of 'meterctl $c'" "$status" 1
	expect "stdout of 'meterctl $c'" "$out" ""
	expect "stderr of 'meterctl $c'" "$(cat /tmp/meterctl-err.$$)" \
		"meterctl ${c%% --*}: account not found"
done
psql "$url" -Atq -c "INSERT INTO accounts (account_id, name) VALUES ('acc_rep', 'reports')"
for f in "--key-id key_none:key" "--sandbox-id sbx_none:sandbox"; do
	c="report usage --account acc_rep --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z ${f%%:*}"
	# shellcheck disable=SC2086
	out=$($ctl $c --database-url "$url" 2>/tmp/meterctl-err.$$) && status=0 || status=$?
	expect "status of 'meterctl $c'" "$status" 1
	expect "stdout of 'meterctl $c'" "$out" ""
	expect "stderr of 'meterctl $c'" "$(cat /tmp/meterctl-err.$$)" \
		"meterctl report usage: ${f#*:} not found in the account"
done
# A bad id is named by its flag, not by the API's field.
for f in "--account a/b:--account" "--account acc_rep --key-id x/y:--key-id" \
	"--account acc_rep --sandbox-id x/y:--sandbox-id"; do
	# shellcheck disable=SC2086
	$ctl report usage ${f%%:*} --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z \
		--database-url "$url" >/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
	expect "status of a bad ${f#*:}" "$status" 2
	expect "stderr of a bad ${f#*:}" "$(cat /tmp/meterctl-err.$$)" \
		"meterctl report usage: ${f#*:}: must be 1 to 64 characters of A-Z a-z 0-9 _ . -"
done
# -o FILE, the one short option, is --output, and takes its value as every
# option does: -o=FILE too. A mistake names it as it was written.
dir=$(mktemp -d /tmp/meterctl-out.XXXXXX)
for o in "-o $dir/a" "-o=$dir/b" "--output $dir/c" "--output=$dir/d"; do
	# shellcheck disable=SC2086
	out=$($ctl report statement --account acc_rep --month 2026-11 --database-url "$url" $o \
		2>/tmp/meterctl-err.$$) && status=0 || status=$?
	expect "report statement $o" "$status" 0
	expect "stdout of report statement $o" "$out" ""
	expect "stderr of report statement $o" "$(cat /tmp/meterctl-err.$$)" ""
done
$ctl report statement --account acc_rep --month 2026-11 --database-url "$url" >"$dir/stdout"
[[ -s $dir/stdout ]] && ok || fail "report statement wrote nothing to standard output"
for f in a b c d; do
	cmp -s "$dir/stdout" "$dir/$f" && ok || fail "report statement's output $f differs"
done
rm -rf "$dir"
for c in "-o a -o b:-o given twice" "-o a --output b:--output given twice (once as -o)" \
	"--output=a -o=b:-o given twice (once as --output)" "-o:-o needs a value" \
	"-o=--x:-o: a value may not begin with --" "-o=:-o needs a value"; do
	# shellcheck disable=SC2086
	$ctl report statement --account acc_rep --month 2026-11 ${c%%:*} \
		>/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
	expect "status of report statement ${c%%:*}" "$status" 2
	expect "stderr of report statement ${c%%:*}" "$(cat /tmp/meterctl-err.$$)" \
		"meterctl report statement: ${c#*:}"
done
# A reader that goes away (meterctl report ... | head): status 1 and one
# line saying the output is incomplete. (A FIFO whose reading side is
# closed before meterctl writes, so no timing lets a write through.)
fifo=/tmp/meterctl-fifo.$$
mkfifo "$fifo"
exec {rw}<>"$fifo"
exec {wo}>"$fifo"
exec {rw}<&-
$ctl report usage --account acc_rep --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z \
	--database-url "$url" >&"$wo" 2>/tmp/meterctl-err.$$ && status=0 || status=$?
exec {wo}>&-
rm -f "$fifo"
expect "report usage, reader gone" "$status" 1
expect "report usage, reader gone: stderr" "$(cat /tmp/meterctl-err.$$)" \
	"meterctl report usage: writing standard output failed: its reader closed it, so the output is incomplete"
rm -f /tmp/meterctl-err.$$
# An incomplete -o FILE: a regular file meterctl wrote is removed; what
# else the path names (a symbolic link, a device: here to and a copy of
# /dev/full, which refuses every write) is left as it is.
dir=$(mktemp -d /tmp/meterctl-out.XXXXXX)
rep="report usage --account acc_rep --from 2026-11-01T00:00:00Z --to 2026-11-02T00:00:00Z"
for r in "$rep" "report statement --account acc_rep --month 2026-11"; do
	# (No byte may be written: the write fails with EFBIG, not SIGXFSZ.)
	# shellcheck disable=SC2086
	# (stderr through a pipe: a file would be held to the same size.)
	err=$( (trap '' XFSZ; ulimit -f 0; $ctl $r --database-url "$url" -o "$dir/out") \
		2>&1) && status=0 || status=$?
	expect "'meterctl ${r%% --*}' to a file it cannot write whole" "$status" 1
	expect "'meterctl ${r%% --*}' to a file it cannot write whole: stderr" "$err" \
		"meterctl ${r%% --*}: writing $dir/out failed: File too large"
	[[ -e $dir/out ]] && fail "${r%% --*}: the incomplete file was left" || ok
done
# Stopped by a signal (SIGTERM here; Ctrl-C's SIGINT and SIGHUP alike, but
# a script's background job ignores SIGINT) while writing -o FILE: the
# file goes with it, and meterctl dies of the signal. Its writes are held
# 3 s (strace), so the signal comes while the file is open; it is sent
# once meterctl catches it.
for r in "$rep" "report statement --account acc_rep --month 2026-11"; do
	# shellcheck disable=SC2086
	strace -f -qq -o /dev/null -e trace=write -e inject=write:delay_enter=3000000 \
		$ctl $r --database-url "$url" -o "$dir/int" 2>/dev/null &
	tracer=$!
	caught=
	for _ in $(seq 200); do
		m=$(pgrep -P "$tracer" || true)
		if [[ -n $m && -e $dir/int ]] &&
			(($(printf '%d' "0x$(awk '/^SigCgt:/ {print $2}' "/proc/$m/status" 2>/dev/null || echo 0)") & 0x4000)); then
			caught=$m
			break
		fi
		sleep 0.05
	done
	[[ -n $caught ]] && ok || fail "${r%% --*}: meterctl never had its output open with SIGTERM caught"
	[[ -n $caught ]] && kill -TERM "$caught"
	wait "$tracer" && status=0 || status=$?
	expect "'meterctl ${r%% --*}' stopped" "$status" 143
	[[ -e $dir/int ]] && fail "${r%% --*}: the interrupted file was left" || ok
	rm -f "$dir/int"
done
ln -s /dev/full "$dir/link"
# shellcheck disable=SC2086
$ctl $rep --database-url "$url" -o "$dir/link" 2>/dev/null && status=0 || status=$?
expect "report usage to a link to /dev/full" "$status" 1
[[ -L $dir/link ]] && ok || fail "report usage removed the symbolic link it wrote through"
if mknod "$dir/full" c 1 7 2>/dev/null; then
	# shellcheck disable=SC2086
	$ctl $rep --database-url "$url" -o "$dir/full" 2>/dev/null && status=0 || status=$?
	expect "report usage to a device" "$status" 1
	[[ -c $dir/full ]] && ok || fail "report usage removed the device it wrote to"
fi
rm -rf "$dir"

# A database whose schema is not the one this meterctl's migrations make:
# status 1 and one line saying what to do, before anything is read or made.
bare=$(make_db meterctl_bare)
cleanup_fns+=("drop_db meterctl_bare")
behind=$(make_db meterctl_behind)
cleanup_fns+=("drop_db meterctl_behind")
$ctl migrate --database-url "$behind" >/dev/null 2>&1
psql "$behind" -Atq -c "DELETE FROM schema_migrations
	WHERE version = (SELECT max(version) FROM schema_migrations)"
# Migrated by another build: a recorded migration's text differs.
foreign=$(make_db meterctl_foreign)
cleanup_fns+=("drop_db meterctl_foreign")
$ctl migrate --database-url "$foreign" >/dev/null 2>&1
psql "$foreign" -Atq -c "UPDATE schema_migrations SET sha256 = repeat('0', 64)
	WHERE version = (SELECT min(version) FROM schema_migrations)"
other_build="the database was migrated by another build: use that build's meterctl and meterd,"
other_build+=" or restore a backup taken before it migrated and run this build's meterctl migrate"
for c in "account create --name x" "key create --account acc_rep --role read_only" \
	"$rep" "report statement --account acc_rep --month 2026-11"; do
	for db in "bare:is not migrated: run meterctl migrate" \
		"behind:this meterctl needs * run meterctl migrate" \
		"other:meter's tables are in schema \"public\", not in \"other\"" \
		"foreign:$other_build"; do
		case ${db%%:*} in
		bare) u=$bare schema=public ;;
		behind) u=$behind schema=public ;;
		foreign) u=$foreign schema=public ;;
		other) u=$url schema=other ;;
		esac
		# shellcheck disable=SC2086
		out=$(METER_DATABASE_SCHEMA=$schema $ctl $c --database-url "$u" 2>/tmp/meterctl-err.$$) &&
			status=0 || status=$?
		expect "'meterctl ${c%% --*}' on a ${db%%:*} database" "$status" 1
		expect "stdout of 'meterctl ${c%% --*}' on a ${db%%:*} database" "$out" ""
		# shellcheck disable=SC2053
		[[ $(cat /tmp/meterctl-err.$$) == "meterctl ${c%% --*}: "*${db#*:}* &&
			$(wc -l </tmp/meterctl-err.$$) -eq 1 ]] && ok ||
			fail "'meterctl ${c%% --*}' on a ${db%%:*} database said '$(cat /tmp/meterctl-err.$$)'"
	done
done
first=$(psql "$foreign" -Atq -c "SELECT name FROM schema_migrations ORDER BY version LIMIT 1")
$ctl migrate --database-url "$foreign" >/dev/null 2>/tmp/meterctl-err.$$ && status=0 || status=$?
expect "'meterctl migrate' on a database another build migrated" "$status" 1
expect "stderr of 'meterctl migrate' on a database another build migrated" \
	"$(cat /tmp/meterctl-err.$$)" \
	"meterctl migrate: migration $first was changed after it was applied (sha256 differs): $other_build"
for c in "account create --name x" "migrate" "$rep"; do
	# shellcheck disable=SC2086
	METER_DATABASE_SCHEMA=Bad $ctl $c --database-url "$url" >/dev/null 2>/tmp/meterctl-err.$$ &&
		status=0 || status=$?
	expect "'meterctl ${c%% --*}' with a bad METER_DATABASE_SCHEMA" "$status" 2
	expect "stderr of 'meterctl ${c%% --*}' with a bad METER_DATABASE_SCHEMA" \
		"$(cat /tmp/meterctl-err.$$)" "meterctl ${c%% --*}: METER_DATABASE_SCHEMA must be 1 to 63 of a-z, 0-9 and _, not starting with a digit or pg_"
done
rm -f /tmp/meterctl-err.$$
expect "accounts made in the bare database" \
	"$(psql "$bare" -Atq -c "SELECT count(*) FROM pg_tables WHERE tablename = 'accounts'")" 0
finish

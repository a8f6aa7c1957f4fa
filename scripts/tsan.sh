#!/usr/bin/env bash
# Data races: builds meter with ThreadSanitizer into build-tsan/ and runs the
# tests where meterd's threads work at once (HTTP threads, request workers,
# the check engine's batchers, the sweeper, the webhook deliverer, the
# collector), or the ctest arguments given instead (e.g. -R test_checks$).
# meterd, meterctl and the tests write any report under a directory of their
# own; one report fails the run, printed. Not part of scripts/test.sh: about
# ten times slower than the sanitizer build the suite uses.
#   scripts/tsan.sh [ctest arguments...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-tsan

bash "$root/scripts/setup.sh"
echo "building into $build (ThreadSanitizer) ..."
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Debug -DMETER_TSAN=ON
reports=$(mktemp -d /tmp/meter-tsan.XXXXXX)
trap 'rm -rf "$reports"' EXIT
# atexit_sleep_ms=0: TSan's second at exit would fail the tests that time a
# shutdown.
export TSAN_OPTIONS="log_path=$reports/report second_deadlock_stack=1 atexit_sleep_ms=0"
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
	args=(-R 'test_checks$|test_checks_race$|test_checks_timeout$|test_checks_dbdown$|test_pooled$|test_webhook$|test_dbpool$|test_shutdown$|test_ingest$|test_sweep_turns$|test_key_tz_race$|test_api_access$|test_readers$')
fi
cd "$build"
status=0
ctest --output-on-failure --timeout 900 -j"$(nproc)" "${args[@]}" || status=$?
if compgen -G "$reports/report*" >/dev/null; then
	for f in "$reports"/report*; do
		echo "== $f"
		cat "$f"
	done
	echo "tsan: ThreadSanitizer reported the above" >&2
	exit 1
fi
[ "$status" -eq 0 ] && echo "tsan: no report"
exit "$status"

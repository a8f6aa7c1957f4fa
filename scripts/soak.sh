#!/usr/bin/env bash
# Soak: the fault and load suites over and over, each round with another
# SIGKILL schedule for test_chaos (METER_CHAOS_SEED = base + round), until
# ROUNDS rounds pass or one fails. Same sanitizer build as scripts/test.sh.
#   scripts/soak.sh [ROUNDS] [SEED]      (default 20 rounds, seed 1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-20}
base=${2:-1}
build=$root/build-test

bash "$root/scripts/setup.sh" browser lint
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Debug -DMETER_SANITIZE=ON
cd "$build"
start=$(date +%s)
for ((r = 1; r <= rounds; r++)); do
	seed=$((base + r))
	echo "soak round $r/$rounds (METER_CHAOS_SEED=$seed) ..."
	if ! METER_CHAOS_SEED=$seed ctest --output-on-failure --timeout 600 \
		-R '^(pg_start|pg_stop|test_chaos|test_outage|test_load|test_crash)$' >"$build/soak-$r.log" 2>&1; then
		tail -40 "$build/soak-$r.log"
		echo "soak: round $r failed (seed $seed); log: $build/soak-$r.log" >&2
		exit 1
	fi
done
echo "soak: $rounds rounds passed in $(($(date +%s) - start)) s (seeds $((base + 1))-$((base + rounds)))"

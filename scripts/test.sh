#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds with warnings
# as errors and AddressSanitizer + UndefinedBehaviorSanitizer, and runs ctest
# (which starts a throwaway PostgreSQL cluster of its own, and runs the static
# checks of scripts/lint.sh as test_lint).
# Extra arguments go to ctest (e.g. -R test_money, -L unit).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-test

bash "$root/scripts/setup.sh" browser lint
echo "building into $build (sanitizers on) ..."
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Debug -DMETER_SANITIZE=ON
cd "$build"
ctest --output-on-failure --timeout 600 -j"$(nproc)" "$@"

#!/usr/bin/env bash
# Install every build and run dependency of meter from Debian's packages.
# Quiet and quick when everything is already there: it only calls apt-get
# for packages that are missing.
set -euo pipefail

packages=(
	build-essential cmake pkg-config git ca-certificates
	postgresql-15 postgresql-client-15 postgresql-contrib libpq-dev
	libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev libssl-dev
	curl procps util-linux jq strace
)
# Extra groups: "bench" for the benchmark commands, "browser" for page tests,
# "fuzz" for scripts/fuzz.sh (clang with libFuzzer, llvm-symbolizer),
# "lint" for scripts/lint.sh (and clang-format for scripts/checksrc.sh).
for extra in "$@"; do
	case "$extra" in
	bench) packages+=(wrk time) ;;
	browser) packages+=(chromium chromium-driver fonts-dejavu-core) ;;
	fuzz) packages+=(clang llvm libclang-rt-dev) ;;
	lint) packages+=(clang clang-tidy clang-format cppcheck) ;;
	*) echo "setup.sh: unknown extra '$extra' (bench, browser, fuzz, lint)" >&2; exit 2 ;;
	esac
done

missing=()
for p in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
	sudo_cmd=(sudo)
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Debian's postgresql-common creates and starts a system cluster on install;
# meter runs its own, so ask it not to.
if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
	"${sudo_cmd[@]}" mkdir -p /etc/postgresql-common
	echo "create_main_cluster = false" | "${sudo_cmd[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Puts promtool in ./bin (for test/rules, the alert rules' unit tests) when
# it is on neither PATH nor there: taken out of Debian's prometheus package
# without installing it, so no Prometheus server is set up or started.
# Nothing is downloaded from anywhere else.
set -euo pipefail
bin=${1:?usage: hack/promtool.sh BIN_DIR CACHE_DIR}
cache=${2:?usage: hack/promtool.sh BIN_DIR CACHE_DIR}
command -v promtool >/dev/null && exit 0
[ -x "$bin/promtool" ] && exit 0
mkdir -p "$bin" "$cache/promtool"
cd "$cache/promtool"
rm -f prometheus_*.deb
if ! apt-get download prometheus >/dev/null 2>&1; then
	# The package lists may be missing (a fresh machine): refresh them.
	if [ "$(id -u)" -ne 0 ]; then
		echo "promtool: apt-get download prometheus failed; run 'sudo apt-get update' or install Debian's prometheus package" >&2
		exit 1
	fi
	apt-get update -qq
	apt-get download prometheus >/dev/null
fi
rm -rf root
dpkg-deb -x prometheus_*.deb root
install -m 0755 root/usr/bin/promtool "$bin/promtool"
rm -rf root prometheus_*.deb
"$bin/promtool" --version | head -1

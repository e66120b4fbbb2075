#!/usr/bin/env bash
# Installs the real node's runtime from Debian's packages when it is missing:
# containerd, runc, the CNI plugins (/usr/lib/cni) and iptables (the kubelet's
# chains), dbus-daemon and prometheus for the tests. Nothing is downloaded from anywhere else.
set -euo pipefail
missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null || missing+=(iptables)
# A private bus stands in for the host's system bus in the systemd restart test.
command -v dbus-daemon >/dev/null || missing+=(dbus-daemon)
# A real Prometheus for the health gates' Prometheus gate.
command -v prometheus >/dev/null || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "the real node needs ${missing[*]} (Debian packages); run as root or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "installing ${missing[*]} from Debian..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

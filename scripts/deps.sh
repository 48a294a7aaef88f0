#!/usr/bin/env bash
# Installs the Debian packages oomguard's demo, e2e tests and benchmarks use,
# only those missing. Needs root (apt-get).
set -euo pipefail
pkgs=(runc busybox-static "$@")
need=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "missing packages: ${need[*]}; run as root, or: sudo apt-get install ${need[*]}" >&2
	exit 1
fi
echo "installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

#!/usr/bin/env bash
# Installs the Debian packages oomguard's demo, e2e tests and benchmarks use,
# only those missing, and makes sure apt knows the cloud kernel the VM tests
# fetch. Needs root (apt-get).
set -euo pipefail
pkgs=(runc crun conmon podman catatonit busybox-static qemu-system-x86 docker-registry gcc make libc6-dev time debootstrap buildah skopeo "$@")
need=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
lists_ok() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | grep -q "Depends: linux-image-"; }
if [ ${#need[@]} -eq 0 ] && lists_ok; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "missing packages: ${need[*]:-none} (or apt lists); run as root, or: sudo apt-get update && sudo apt-get install ${need[*]:-}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}" >&2
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

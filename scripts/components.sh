#!/usr/bin/env bash
# components.sh DIR: builds the real components the end-to-end tests run, each
# from a pinned Go module under test/, into DIR/NAME/. A component is rebuilt
# only when its pins (go.mod, go.sum) changed; each prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(realpath -m "${1:-build/components}")
gobuild=$PWD/scripts/gobuild
mkdir -p "$dest"

# module NAME DIR BIN=PKG...: go build each PKG of the module in DIR.
module() {
	local name=$1 dir=$2
	shift 2
	local out=$dest/$name stamp
	stamp=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -d' ' -f1)
	if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
		echo "components: $name up to date"
		return
	fi
	local start=$SECONDS
	rm -rf "$out"
	mkdir -p "$out"
	for b in "$@"; do
		(cd "$dir" && GOFLAGS=-mod=mod "$gobuild" "$out/${b%%=*}" "${b#*=}")
	done
	echo "$stamp" >"$out/.stamp"
	echo "components: built $name in $((SECONDS - start)) s"
}

module containerd-2 test/containerd \
	containerd=./cmd/containerd \
	containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	kubeletish=./cmd/kubeletish

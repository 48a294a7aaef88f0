#!/usr/bin/env bash
# benchkit.sh ARCH: the bench kit for linux/ARCH, build/bench-kit-ARCH.tar.gz:
# the bench (static) and every program its sections run, prebuilt, and the
# files they read, laid out as the repository is under
# oomguard-bench-kit-ARCH/, with run-bench at its root. Unpacked on any Linux
# node of that architecture, run-bench runs the bench there as root, without
# Go, the sources or a network (bench/README.md).
#
# For this machine's architecture the kit takes what make build, image and
# test-bins built, and the components from build/components (built there if
# missing); for another it builds the programs and the components for it
# (GOARCH), the components into build/bench-kit/components-ARCH.
#
# KIT_SECTIONS (comma-separated) makes a smaller kit, of those sections
# alone; STAMP is the linker flags make build stamps the programs with,
# VERSION the release the kit says it is.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?usage: benchkit.sh ARCH}
unset OOMGUARD_REPO_ROOT OOMGUARD_PREBUILT GOARCH GOOS
host=$(go env GOARCH)
name=oomguard-bench-kit-$arch
stage=build/bench-kit/$arch
kit=$stage/$name
out=build/bench-kit-$arch.tar.gz
start=$SECONDS

# What each section runs beyond the bench, the programs it builds as it
# runs (bench -prebuild), the shipped configuration, the chart and
# bench/testdata, which every kit carries: oomguard's programs by name; the
# guest (the VM's workload, a memory hog here); the control plane's one
# binary; helm (the chart's RBAC); distribution's registry (where a node
# has no Debian's) and crane (the patch as a user scripts it); the release
# image and its binaries. The cluster section's VM is not carried.
declare -A needs=(
	[cluster]=""
	[doctor]="oomguard-doctor"
	[exec]="oomguard-nri"
	[fleet]="oomguard-nri guest kube helm"
	[hook]="oomguard-hook"
	[image]="image"
	[imagepatch]="imagepatch registry crane"
	[init]="oomguard-init"
	[nri]="oomguard-nri"
	[oomkills]="oomguard-nri guest"
	[podman]="oomguard-hook"
	[webhook]="imagepatch registry kube"
	[webhook-memory]="imagepatch registry"
)
sections=${KIT_SECTIONS:-}
want=" "
for s in ${sections//,/ }; do
	if [ ! -v "needs[$s]" ]; then
		echo "benchkit: no section $s in KIT_SECTIONS; the sections: ${!needs[*]}" >&2
		exit 2
	fi
	want+="${needs[$s]} "
done
[ -n "$sections" ] || want+="${needs[*]} "
has() { [[ $want == *" $1 "* ]]; }

# cross: the environment that builds for the kit's architecture.
cross=()
[ "$arch" = "$host" ] || cross=(GOOS=linux GOARCH="$arch")
gobuild() { env "${cross[@]}" ./scripts/gobuild "$@"; }
programs="oomguard-hook oomguard-init oomguard-nri oomguard-doctor imagepatch"

# What make build, image and test-bins wrote that the kit carries as is.
need=
! has oomguard-init || need+=" bin/oomguard-init-linux-amd64 bin/oomguard-init-linux-arm64"
! has image || need+=" build/image/index.json build/image-bin/amd64 build/image-bin/arm64"
if [ "$arch" = "$host" ]; then
	for p in $programs guest; do
		! has "$p" || need+=" $([ "$p" = guest ] && echo build/test-bin || echo bin)/$p"
	done
fi
for f in $need; do
	[ -e "$f" ] || {
		echo "benchkit: $f is missing: run make build image test-bins" >&2
		exit 1
	}
done
# The crane the imagepatch section compares with is the components'
# (distribution's module): it must be the release the bench names.
crane=$(sed -n 's/^\tgithub.com\/google\/go-containerregistry \(v[^ ]*\).*/\1/p' test/distribution/go.mod)
if has crane && [ "$crane" != "$(sed -n 's/^\tcraneVersion = "\(.*\)"/\1/p' bench/imagepatch.go)" ]; then
	echo "benchkit: bench/imagepatch.go's craneVersion is not test/distribution's crane, $crane" >&2
	exit 1
fi

rm -rf "$stage"
mkdir -p "$kit"
# put SRC... DIR: the files SRC into the kit's DIR, hard links where they
# can be (the tarball copies them).
put() {
	local dir=$kit/${*: -1} f
	mkdir -p "$dir"
	for f in "${@:1:$#-1}"; do
		ln -f "$f" "$dir/" 2>/dev/null || cp -p "$f" "$dir/"
	done
}
# puttree SRC DIR: the tree SRC into the kit's DIR.
puttree() {
	mkdir -p "$kit/$2"
	cp -al "$1" "$kit/$2/" 2>/dev/null || cp -a "$1" "$kit/$2/"
}

# The bench, and the programs its sections build as they run (its floors
# and baselines), built by the bench itself (-prebuild) on this machine,
# for ARCH.
gobuild "$kit/bench/bench" ./bench
runner=$kit/bench/bench
if [ "$arch" != "$host" ]; then
	runner=build/bench-kit/bench-$host
	./scripts/gobuild "$runner" ./bench
fi
env "${cross[@]}" "$runner" -prebuild "$kit/bench/programs"
rm -f "$kit"/bench/programs/*.go
puttree bench/testdata bench
cp bench/run-bench "$kit/run-bench"
printf "KIT_NAME='%s'\nKIT_ARCH=%s\nKIT_SECTIONS=%s\n" "$name ${VERSION:-dev}" "$arch" "$sections" >"$kit/KIT"
put deploy/config.toml deploy
puttree deploy/helm/oomguard deploy/helm

# oomguard's programs as make build builds them, and the guest as make
# test-bins does.
for p in $programs; do
	has "$p" || continue
	if [ "$arch" = "$host" ]; then
		put "bin/$p" bin
		continue
	fi
	stamp=${STAMP:-}
	[ "$p" != oomguard-init ] || stamp=
	LDFLAGS="$stamp" gobuild "$kit/bin/$p" "./cmd/$p"
done
! has oomguard-init || put bin/oomguard-init-linux-amd64 bin/oomguard-init-linux-arm64 bin
if has guest && [ "$arch" = "$host" ]; then
	put build/test-bin/guest build/test-bin
elif has guest; then
	gobuild "$kit/build/test-bin/guest" ./test/vm/guest
fi
if has image; then
	puttree build/image build
	puttree build/image-bin build
fi

# The components, as make components builds them.
comps=build/components
[ "$arch" = "$host" ] || comps=build/bench-kit/components-$arch
set --
! has registry && ! has crane || set -- "$@" distribution
! has kube || set -- "$@" kubernetes
! has helm || set -- "$@" helm
if [ $# -gt 0 ]; then
	env "${cross[@]}" ./scripts/components.sh "$comps" "$(
		IFS=,
		echo "$*"
	)"
fi
! has registry || put "$comps/distribution/registry" build/components/distribution
if has crane; then
	put "$comps/distribution/crane" build/components/distribution
	mkdir -p "$kit/build/bench"
	ln -s ../components/distribution/crane "$kit/build/bench/crane-$crane"
fi
if has kube; then
	put "$comps/kubernetes/kube" build/components/kubernetes
	for n in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
		ln -s kube "$kit/build/components/kubernetes/$n"
	done
fi
! has helm || put "$comps/helm/helm" build/components/helm

tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$out.tmp" "$name"
mv "$out.tmp" "$out"
echo "benchkit: $out: $(du -h "$out" | cut -f1), $(du -sh "$kit" | cut -f1) unpacked, ${sections:-every section}; in $((SECONDS - start)) s"
rm -rf "$stage"

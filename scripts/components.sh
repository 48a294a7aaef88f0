#!/usr/bin/env bash
# components.sh DIR [SET]: builds the real components the end-to-end tests run, each
# from pinned sources under test/, into DIR/NAME/: containerd 2.x and 1.7
# (two releases, either side of NRI's score adjustment), Kubernetes (the
# kubelet, and etcd with the control plane and kubectl in one binary),
# CRI-O, helm and kustomize, the NVIDIA container toolkit's nvidia-ctk,
# distribution v3's registry with crane and an htpasswd writer, and cosign.
# A component is rebuilt only when its pins changed; each says how long it
# took.
#
# SET is all (the default), host (those make e2e-host runs too), vm
# (those only the VM tier runs: CI builds them while the host tier runs), or
# components by name, comma-separated (the bench kit's: distribution,
# kubernetes,helm). GOARCH passes through, for the bench kit of another
# architecture, into a DIR of its own.
#
# The VM tier runs the newest and the oldest releases (CI); with
# OOMGUARD_E2E_MATRIX=1 (make e2e-matrix) the releases between them too:
# containerd 2.1.4 and CRI-O 1.34.11.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(realpath -m "${1:-build/components}")
only=${2:-all}
case $only in
all | host | vm) ;;
"" | *[!a-z0-9.,-]*)
	echo "usage: components.sh DIR [all|host|vm|NAME,...]" >&2
	exit 2
	;;
esac
matrix=${OOMGUARD_E2E_MATRIX:-}
gobuild=$PWD/scripts/gobuild
mkdir -p "$dest"

# wanted NAME: whether NAME is in the set asked for.
# (The host tier runs containerd 1.7.35 and CRI-O's crio too: internal/install.)
vm_only=" containerd-1.7.25 containerd-2.1.4 kubelet-1.34 nvidia crio-1.34.11 "
wanted() {
	case $only in
	all) true ;;
	host) [[ $vm_only != *" $1 "* ]] ;;
	vm) [[ $vm_only == *" $1 "* ]] ;;
	*) [[ ",$only," == *",$1,"* ]] ;;
	esac
}

# fresh NAME PINS...: true when DIR/NAME was built from these pins; else
# empties it for a build.
fresh() {
	local name=$1 stamp
	shift
	wanted "$name" || return 0
	stamp=$(cat "$@" <(printf '%s' "${GOARCH:-}") | sha256sum | cut -d' ' -f1)
	if [ "$(cat "$dest/$name/.stamp" 2>/dev/null)" = "$stamp" ]; then
		echo "components: $name up to date"
		return 0
	fi
	rm -rf "${dest:?}/$name"
	mkdir -p "$dest/$name"
	echo "$stamp" >"$dest/$name/.stamp.new"
	return 1
}

built() {
	mv "$dest/$1/.stamp.new" "$dest/$1/.stamp"
	echo "components: built $1 in $(($SECONDS - $2)) s"
}

# module NAME DIR MODFILE BIN=PKG...: go build each PKG of the Go module in
# DIR, pinned by MODFILE (go.mod or another), its .sum, DIR's sources,
# $LDFLAGS and $TAGS (build tags).
module() {
	local name=$1 dir=$2 modfile=$3 start=$SECONDS
	shift 3
	local sum=${modfile%.mod}.sum
	# shellcheck disable=SC2046 # the module's own sources are pins too
	fresh "$name" <(printf '%s' "${LDFLAGS:-}" "${TAGS:-}") "$dir/$modfile" "$dir/$sum" $(find "$dir" -name '*.go' | sort) && return
	for b in "$@"; do
		(cd "$dir" && GOFLAGS="-mod=mod -modfile=$modfile" "$gobuild" "$dest/$name/${b%%=*}" "${b#*=}" ${TAGS:+"-tags=$TAGS"})
	done
	built "$name" "$start"
}

# containerd 2.x: the newest release (with kubeletish, the VM's CRI client)
# and, for the matrix, 2.1.4 (its own go.mod; its App().Run takes no context).
module containerd-2 test/containerd go.mod \
	containerd=./cmd/containerd \
	containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	kubeletish=./cmd/kubeletish
if [ -n "$matrix" ]; then
	TAGS=containerd_2_1 module containerd-2.1.4 test/containerd go.2.1.4.mod \
		containerd=./cmd/containerd \
		containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
fi

for v in 1.7.35 1.7.25; do
	modfile=go.mod
	[ "$v" = 1.7.35 ] || modfile=go.$v.mod
	module "containerd-$v" test/containerd17 "$modfile" \
		containerd=./cmd/containerd \
		containerd-shim-runc-v2=github.com/containerd/containerd/cmd/containerd-shim-runc-v2
done

# The kubelet goes into the VM; kube (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) runs on the build host:
# one go build, their shared packages compiled once.
kube=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\).*/\1/p; s/^\tk8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' test/kubernetes/go.mod | head -1)
minor=$(echo "$kube" | cut -d. -f2)
start=$SECONDS
# shellcheck disable=SC2046
if ! fresh kubernetes test/kubernetes/go.mod test/kubernetes/go.sum $(find test/kubernetes -name '*.go' | sort); then
	(cd test/kubernetes && GOFLAGS=-mod=mod \
		LDFLAGS="-X k8s.io/component-base/version.gitVersion=$kube -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
		"$gobuild" "$dest/kubernetes/" k8s.io/kubernetes/cmd/kubelet ./cmd/kube)
	for n in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do ln -sf kube "$dest/kubernetes/$n"; done
	built kubernetes "$start"
fi
# The oldest kubelet the VM tier runs (under the newest control plane: the
# skew policy allows a kubelet three minors older), from its own go.mod.
old=$(sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' test/kubernetes/go.1.34.mod | head -1)
start=$SECONDS
if ! fresh kubelet-1.34 test/kubernetes/go.1.34.mod test/kubernetes/go.1.34.sum; then
	(cd test/kubernetes && GOFLAGS="-mod=mod -modfile=go.1.34.mod" \
		LDFLAGS="-X k8s.io/component-base/version.gitVersion=$old -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$old" | cut -d. -f2)" \
		"$gobuild" "$dest/kubelet-1.34/kubelet" k8s.io/kubernetes/cmd/kubelet)
	built kubelet-1.34 "$start"
fi

# nvidia-ctk needs cgo (NVML is loaded at run time); the VM gets its libc.
start=$SECONDS
# shellcheck disable=SC2046
if ! fresh nvidia test/nvidia/go.mod test/nvidia/go.sum $(find test/nvidia -name '*.go' | sort); then
	# CGO_CFLAGS: NVML's headers mark half their functions deprecated, a warning each.
	(cd test/nvidia && GOFLAGS=-mod=mod "$gobuild" "$dest/nvidia/nvidia-uninstall" ./cmd/nvidia-uninstall &&
		GOFLAGS=-mod=mod CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" "$gobuild" "$dest/nvidia/nvidia-ctk" github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk)
	built nvidia "$start"
fi

# The real helm and kustomize the chart and the kustomization are rendered with;
# helm's offline rendering (helm template) as for the Kubernetes the tests run,
# not its default 1.20, which the chart's kubeVersion refuses.
helm_k8s="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
helm_k8s="$helm_k8s -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor"
LDFLAGS=$helm_k8s module helm test/helm go.mod \
	helm=helm.sh/helm/v3/cmd/helm \
	kustomize=sigs.k8s.io/kustomize/kustomize/v5

# The image tests' registries and tools: distribution v3's registry (beside
# Debian's 2.8), crane (the patch as a user scripts it, to compare), a
# bcrypt htpasswd writer for the registry's basic auth; and sigstore's
# cosign, which signs the test images and verifies imagepatch's signatures.
module distribution test/distribution go.mod \
	registry=github.com/distribution/distribution/v3/cmd/registry \
	crane=github.com/google/go-containerregistry/cmd/crane \
	htpasswd=./cmd/htpasswd
module cosign test/cosign go.mod \
	cosign=github.com/sigstore/cosign/v3/cmd/cosign

# kube-score, a checker platform teams run on charts (test/helm runs it on
# every ci values file).
module kubescore test/kubescore go.mod \
	kube-score=github.com/zegl/kube-score/cmd/kube-score

# CRI-O is not on the module proxy: from its release source, vendored: the
# newest release as crio, and for the matrix 1.34.11 (their vendored
# packages that are the same compile once).
crio_releases="crio=1.36.3"
[ -z "$matrix" ] || crio_releases="$crio_releases crio-1.34.11=1.34.11"
for r in $crio_releases; do
	name=${r%%=*} crio_src=test/crio/crio-v${r#*=}-pruned-src.tar.xz
	start=$SECONDS
	fresh "$name" "$crio_src" && continue
	src=$dest/src/$name
	rm -rf "$src"
	mkdir -p "$src"
	tar -xJf "$crio_src" -C "$src"
	tags='containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper'
	for b in crio=./cmd/crio copyimg=./test/copyimg; do
		(cd "$src" && "$gobuild" "$dest/$name/${b%%=*}" "${b#*=}" -mod=vendor "-tags=$(echo $tags | tr ' ' ,)")
	done
	make -s -C "$src/pinns" >/dev/null
	cp "$src/bin/pinns" "$dest/$name/pinns"
	rm -rf "$src"
	built "$name" "$start"
done

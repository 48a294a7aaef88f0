// Package kubernetes pins the Kubernetes the VM tier runs: k8s.io/kubernetes
// at a release, its ./staging modules replaced by the published k8s.io
// modules of the same minor, so that the kubelet (cmd/kubelet) and the
// control plane (cmd/kube: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl in one binary) build from the Go module proxy
// (make components).
package kubernetes

// Package kubelet pins the kubelet the VM tier runs: k8s.io/kubernetes at a
// release, its ./staging modules replaced by the published k8s.io modules of
// the same minor, so that cmd/kubelet builds from the Go module proxy
// (make components).
package kubelet

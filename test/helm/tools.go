//go:build tools

// Package helm pins the real helm and kustomize the chart and the
// kustomization are rendered with in the tests; make components builds them.
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)

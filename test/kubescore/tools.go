//go:build tools

// Package kubescore pins kube-score, one of the checkers a platform team
// runs on a chart, which test/helm runs on every ci values file; make
// components builds it.
package kubescore

import (
	_ "github.com/zegl/kube-score/cmd/kube-score"
)

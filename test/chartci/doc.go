// Package chartci validates every object the chart renders for each of its
// ci values files (deploy/helm/oomguard/ci, chart-testing's convention) on
// a real API server, strictly: server-side dry runs with unknown and
// duplicate fields refused, the Prometheus Operator's and cert-manager's
// kinds against their own CRDs.
package chartci

// Package chartcheck checks the Helm chart in deploy/helm/airlock offline:
// its tests render the chart in-process with Helm's Go library (no helm
// binary, no cluster) for default values and for values files that switch
// every option on, and decode every rendered object strictly into the
// Kubernetes API types (k8s.io/api), so an unknown or misspelled field
// fails (and values.schema.json refuses a values key values.yaml does not
// have). They then check what decoding cannot: selectors match their pods,
// every Secret a pod reads exists, every $(VAR) in args is defined, and
// each part runs with the security context README.md gives it.
//
// It is its own Go module so that Helm's and Kubernetes' dependencies stay
// out of the main module; scripts/test.sh runs it as the "helm chart" stage:
//
//	cd deploy/helm/chartcheck && go test ./...
package chartcheck

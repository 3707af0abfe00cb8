// Package apirole composes `airlock serve --role api`, the cluster's
// stateless api tier: it opens the shared PostgreSQL store (unscoped, no
// lease: any number of instances), resolves the API key as every role does
// (internal/startup), opens and collects the artifact store when
// --artifacts is given (internal/artifactgc, one instance at a time under a
// database lock), and serves internal/cluster/gateway behind the request-id
// middleware, printing the SDKs' `export E2B_API_URL=…` line.
//
// internal/daemon validates the flags (checkRole: a PostgreSQL --store, the
// cluster secret, the api tier's TLS material) and calls Run; everything the
// role runs is here, and it links no node code: no sandbox manager, network,
// runtime, node API or proxy (TestRouterImportsNoNodeCode in
// internal/cluster). A template's resources for placement come from the
// shared templates table through internal/imagebuild/buildspec, not the
// builder. How the role works: internal/cluster/doc.go ("Cluster roles").
package apirole

// Package wire holds the pure facts of the E2B wire that both sides of a
// cluster read: the api tier (internal/cluster/gateway) and a node's own
// API and sandbox proxy (internal/api, internal/proxy), which are also the
// single host's. It is part of the cluster contract (internal/cluster) and
// imports nothing of Airlock's, so the router can use it without linking
// node code (TestRouterImportsNoNodeCode guards that):
//
//   - the sandbox id's shape (ValidID, IDChars; internal/runtime's checks
//     are these);
//   - the sandbox-traffic routing: the E2b-Sandbox-* headers and the
//     `<port>-<id>.<domain>` host (ParseSandboxHost, ParsePort);
//   - the list pagination token (Cursor, EncodeCursor, DecodeCursor): the
//     api tier merges the nodes' pages and hands out tokens a node decodes.
package wire

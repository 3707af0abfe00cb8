// Package startup holds the start-up steps every role of `airlock serve`
// shares (--role all, node and api): resolving the clients' API key,
// opening the artifact store --artifacts names, and the URL a listener is
// announced at. It imports no sandbox code, so the api tier's composition
// (internal/cluster/apirole) uses it without linking the node side;
// internal/daemon composes the other two roles with it.
package startup

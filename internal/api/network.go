package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// toNetworkJSON is SandboxDetail.network (the parts we enforce).
func toNetworkJSON(sb *sandbox.Sandbox) *airlock.SandboxNetwork {
	n := &airlock.SandboxNetwork{AllowOut: sb.AllowOut, DenyOut: sb.DenyOut, AllowPublicTraffic: sb.TrafficToken == "",
		MaskRequestHost: sb.MaskRequestHost, Approval: approvalJSON(sb.Approval)}
	if len(sb.NetworkRules) > 0 { // E2B's info echoes rules materialised (spec §11.3)
		n.Rules, _ = json.Marshal(sb.NetworkRules)
	}
	if p := sb.EgressProxy; p != nil { // never the password (spec §11.3)
		n.EgressProxy = &airlock.EgressProxyInfo{Address: p.Address, Username: p.Username}
	}
	return n
}

// isSetJSON reports whether an optional JSON value carries something.
func isSetJSON(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "{}"
}

// egress parses the create body's allowOut/denyOut (400 on bad entries).
func egress(n *airlock.NetworkConfig) (network.Egress, error) {
	if n == nil {
		return network.Egress{}, nil
	}
	return sandbox.ParseEgress(n.AllowOut, n.DenyOut)
}

// updateNetwork is PUT /sandboxes/{id}/network: the whole egress policy is
// replaced; omitted fields are cleared (internet access back on).
func (a *api) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var body airlock.NetworkUpdate
	if !decodeBody(w, r, &body, true) {
		return
	}
	rules, proxy, done := a.checkRulesAndProxy(w, r, body.Rules, body.EgressProxy) // network_rules.go
	if done {
		return
	}
	eg, err := sandbox.ParseEgress(body.AllowOut, body.DenyOut)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ap, done := a.parseApproval(w, r, body.Approval) // approvals.go
	if done {
		return
	}
	allow := body.AllowInternetAccess == nil || *body.AllowInternetAccess
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	if err := sb.SetNetwork(r.Context(), sandbox.NetworkUpdate{AllowInternet: allow, Egress: eg, Rules: rules, Proxy: proxy, Approval: ap}); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// networkLog is GET /sandboxes/{id}/network/log?limit=N: the sandbox's
// egress audit log (connection attempts and DNS decisions), oldest first;
// limit (1..audit.DefaultSize) keeps the most recent N.
func (a *api) networkLog(w http.ResponseWriter, r *http.Request) {
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > audit.DefaultSize {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", audit.DefaultSize))
			return
		}
		limit = n
	}
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	entries, err := sb.EgressLog(limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, airlock.NetworkLog{SandboxID: sb.ID(), Entries: entries, Dropped: sb.EgressDropped()})
}

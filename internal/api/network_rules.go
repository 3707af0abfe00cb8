package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// checkRulesAndProxy parses a body's network rules; it answers the request
// (and reports done) when they are refused: bad rules and unknown secret
// names 400 (as E2B answers at create), a bad egressProxy 400 (egress_proxy.go).
// Valid rules are kept with the sandbox (CreateRequest.NetworkRules,
// Live.SetNetwork) and enforced by the node's egress proxy
// (test/gohttp/secrets_proxy_test.go); a valid egressProxy likewise
// (CreateRequest.EgressProxy), its password sealed, and the node's SOCKS
// relay tunnels the sandbox's TCP through it (test/gohttp/egress_proxy_test.go).
func (a *api) checkRulesAndProxy(w http.ResponseWriter, r *http.Request, rules, egressProxy json.RawMessage) (rs egressproxy.Rules, ep *sandbox.EgressProxy, done bool) {
	if isSetJSON(rules) {
		var err error
		rs, err = egressproxy.ParseRules(rules)
		var be *egressproxy.BadRulesError
		if errors.As(err, &be) {
			middleware.WriteError(w, http.StatusBadRequest, be.Msg)
			return nil, nil, true
		} else if err != nil {
			a.fail(w, r, err)
			return nil, nil, true
		}
		if names := rs.SecretNames(); len(names) > 0 && a.opts.Secrets != nil {
			missing, err := a.opts.Secrets.Missing(r.Context(), names)
			if err != nil {
				a.fail(w, r, err)
				return nil, nil, true
			}
			if len(missing) > 0 {
				middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Network transform rules reference unknown secrets: %s", strings.Join(missing, ", ")))
				return nil, nil, true
			}
		}
	}
	if isSetJSON(egressProxy) {
		var msg string
		var err error
		if ep, msg, err = a.parseEgressProxy(r.Context(), egressProxy); err != nil {
			a.fail(w, r, err)
			return nil, nil, true
		} else if msg != "" {
			middleware.WriteError(w, http.StatusBadRequest, msg)
			return nil, nil, true
		}
	}
	return rs, ep, false
}

package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// checkRulesAndProxy parses a body's network rules; it answers the request
// (and reports done) when they are refused: bad rules and unknown secret
// names 400 (as E2B answers at create), an egressProxy 501. Valid rules are
// kept with the sandbox (CreateRequest.NetworkRules, Live.SetNetwork) and
// enforced by the node's egress proxy (test/gohttp/secrets_proxy_test.go).
func (a *api) checkRulesAndProxy(w http.ResponseWriter, r *http.Request, rules, egressProxy json.RawMessage) (rs egressproxy.Rules, done bool) {
	if isSetJSON(rules) {
		var err error
		rs, err = egressproxy.ParseRules(rules)
		var be *egressproxy.BadRulesError
		if errors.As(err, &be) {
			middleware.WriteError(w, http.StatusBadRequest, be.Msg)
			return nil, true
		} else if err != nil {
			a.fail(w, r, err)
			return nil, true
		}
		if names := rs.SecretNames(); len(names) > 0 && a.opts.Secrets != nil {
			missing, err := a.opts.Secrets.Missing(r.Context(), names)
			if err != nil {
				a.fail(w, r, err)
				return nil, true
			}
			if len(missing) > 0 {
				middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Network transform rules reference unknown secrets: %s", strings.Join(missing, ", ")))
				return nil, true
			}
		}
	}
	if isSetJSON(egressProxy) {
		middleware.WriteError(w, http.StatusNotImplemented, "egress proxies (network.egressProxy) are not supported yet")
		return nil, true
	}
	return rs, false
}

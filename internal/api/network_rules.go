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

// msgRulesNotEnforced answers valid network.rules: they are checked as E2B
// checks them (400s first), but no node steers traffic to the egress proxy
// yet (issue 29), and accepting rules that are not applied would mislead.
const msgRulesNotEnforced = "network rules are not supported yet: they are checked, but this node does not enforce them"

// rulesEnforced turns valid network.rules from a 501 into rules kept with
// the sandbox (CreateRequest.NetworkRules, Live.SetNetwork). It stays off
// until a node steers ruled traffic to the egress proxy and installs its CA
// (issue 29, second part), so that rules are never accepted unapplied.
const rulesEnforced = false

// checkRulesAndProxy parses a body's network rules; it answers the request
// (and reports done) when they are refused: bad rules and unknown secret
// names 400 (as E2B answers at create), rules 501 while not enforced, an
// egressProxy 501.
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
		msg := "network rules and egress proxies are not supported yet"
		if isSetJSON(rules) && !rulesEnforced {
			msg = msgRulesNotEnforced
		}
		middleware.WriteError(w, http.StatusNotImplemented, msg)
		return nil, true
	}
	if isSetJSON(rules) && !rulesEnforced {
		middleware.WriteError(w, http.StatusNotImplemented, msgRulesNotEnforced)
		return nil, true
	}
	return rs, false
}

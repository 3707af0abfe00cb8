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

// checkRulesAndProxy answers a body whose network has rules or an
// egressProxy and reports whether it did: bad rules and unknown secret
// names 400 (as E2B answers at create), then 501.
func (a *api) checkRulesAndProxy(w http.ResponseWriter, r *http.Request, rules, egressProxy json.RawMessage) bool {
	if isSetJSON(rules) {
		rs, err := egressproxy.ParseRules(rules)
		var be *egressproxy.BadRulesError
		if errors.As(err, &be) {
			middleware.WriteError(w, http.StatusBadRequest, be.Msg)
			return true
		} else if err != nil {
			a.fail(w, r, err)
			return true
		}
		if names := rs.SecretNames(); len(names) > 0 && a.opts.Secrets != nil {
			missing, err := a.opts.Secrets.Missing(r.Context(), names)
			if err != nil {
				a.fail(w, r, err)
				return true
			}
			if len(missing) > 0 {
				middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Network transform rules reference unknown secrets: %s", strings.Join(missing, ", ")))
				return true
			}
		}
	}
	if isSetJSON(rules) || isSetJSON(egressProxy) {
		msg := msgRulesNotEnforced
		if !isSetJSON(rules) {
			msg = "network rules and egress proxies are not supported yet"
		}
		middleware.WriteError(w, http.StatusNotImplemented, msg)
		return true
	}
	return false
}

package api

import (
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// fork answers POST /sandboxes/{id}/fork {timeout?, count?}: 201 with one
// result per child; a non-201 status means no child was attempted.
func (a *api) fork(w http.ResponseWriter, r *http.Request) {
	var body airlock.ForkBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	timeout := defaultTimeoutV2
	if body.Timeout != nil {
		if *body.Timeout <= 0 {
			middleware.WriteError(w, http.StatusBadRequest, "timeout must be a positive number of seconds")
			return
		}
		timeout = time.Duration(*body.Timeout) * time.Second
	}
	results, err := a.m.Fork(r.Context(), pathID(r), count, timeout)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]airlock.ForkResult, len(results))
	for i, res := range results {
		if res.Err != nil {
			code, msg := http.StatusInternalServerError, "starting the fork failed (see the daemon log)"
			if ue, ok := sandbox.AsUserError(res.Err); ok {
				code, msg = ue.Code, ue.Msg
			} else {
				a.log.Error("fork child failed", "parent", pathID(r), "err", res.Err)
			}
			out[i].Error = &airlock.Error{Code: code, Message: msg}
			continue
		}
		sb := a.toSandbox(res.Sandbox)
		out[i].Sandbox = &sb
	}
	middleware.WriteJSON(w, http.StatusCreated, out)
}

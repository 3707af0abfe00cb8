//go:build linux

package server

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"
)

// initRequest is the POST /init body (spec §3.5); every field is optional.
type initRequest struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken"`
	Timestamp      *time.Time        `json:"timestamp"`
	DefaultUser    *string           `json:"defaultUser"`
	DefaultWorkdir *string           `json:"defaultWorkdir"`
	// CABundle (PEM) is installed into the system trust store (cabundle.go).
	CABundle *string `json:"caBundle"`
	// Accepted and ignored for now: volumeMounts, hyperloopIP, lifecycleID.
}

// maxInitBody bounds the /init request body.
const maxInitBody = 1 << 20

func (h *Handler) init(w http.ResponseWriter, r *http.Request) {
	// Once a token is set, only its holder may re-initialise (see package doc).
	if h.st.AccessToken() != "" && !h.st.CheckToken(r.Header.Get("X-Access-Token")) {
		writeError(w, http.StatusUnauthorized, "agent already initialised: X-Access-Token required")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxInitBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("reading body: %v", err))
		return
	}
	if len(body) > maxInitBody {
		writeError(w, http.StatusRequestEntityTooLarge, "body too large")
		return
	}
	var req initRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid JSON body: %v", err))
			return
		}
	}
	if req.Timestamp != nil {
		if d := time.Since(*req.Timestamp); d > time.Second || d < -time.Second {
			if err := h.opts.SetClock(*req.Timestamp); err != nil {
				h.log.Warn("setting clock", "error", err)
			} else {
				h.log.Info("clock set", "to", req.Timestamp.UTC(), "skew", d)
			}
		}
	}
	if req.CABundle != nil && *req.CABundle != "" {
		bundle, extra := h.opts.caPaths()
		if err := installCABundle([]byte(*req.CABundle), bundle, extra); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("installing caBundle: %v", err))
			return
		}
		env := caEnv(bundle, extra)
		maps.Copy(env, h.st.EnvVars())
		maps.Copy(env, req.EnvVars)
		req.EnvVars = env
	}
	h.st.Init(req.AccessToken, req.DefaultUser, req.DefaultWorkdir, req.EnvVars)
	h.log.Info("initialised", "defaultUser", h.st.DefaultUser(), "defaultWorkdir", h.st.DefaultWorkdir(),
		"envVars", len(req.EnvVars), "secured", h.st.AccessToken() != "")
	w.Header().Set("X-Envd-Version", h.opts.Version)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// envs returns the sandbox default env vars (as processes see them).
func (h *Handler) envs(w http.ResponseWriter, r *http.Request) {
	out := h.st.EnvVars()
	if out == nil {
		out = map[string]string{}
	}
	merged := map[string]string{"E2B_SANDBOX": "true"}
	maps.Copy(merged, out)
	writeJSON(w, http.StatusOK, merged)
}

func (h *Handler) metricsHandler(w http.ResponseWriter, r *http.Request) {
	m, err := h.metrics.sample(r.Context())
	if err != nil {
		h.log.Error("collecting metrics", "error", err)
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("collecting metrics: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, m)
}

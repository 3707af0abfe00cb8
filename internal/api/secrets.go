package api

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// maxSecretBodyBytes is E2B's body cap on /secrets.
const maxSecretBodyBytes = 512 << 10

// secretJSON is E2B's Secret: never the value.
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

func toSecretJSON(s *store.Secret) secretJSON {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return secretJSON{SecretID: s.ID, Name: s.Name, CurrentVersion: s.Version, Metadata: md, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

type newSecretBody struct {
	Name     string            `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type secretUpdateBody struct {
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (a *api) secretRoutes() {
	h := a.mux.HandleFunc
	h("POST /secrets", a.secretsOn(a.createSecret))
	h("GET /secrets", a.secretsOn(a.listSecrets))
	h("GET /secrets/{secretID}", a.secretsOn(a.getSecret))
	h("POST /secrets/{secretID}", a.secretsOn(a.updateSecret))
	h("DELETE /secrets/{secretID}", a.secretsOn(a.deleteSecret))
}

// secretsOn sets Cache-Control: no-store and E2B's body cap, and answers
// 403 (as E2B does without the backend) when the daemon keeps no secrets.
func (a *api) secretsOn(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if a.opts.Secrets == nil {
			middleware.WriteError(w, http.StatusForbidden, "Secrets are not enabled on this daemon")
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxSecretBodyBytes)
		}
		next(w, r)
	}
}

// secretFail answers a secrets error: refusals with their code, a missing
// secret 404, the rest hidden (a.fail).
func (a *api) secretFail(w http.ResponseWriter, r *http.Request, err error) {
	var ue *secrets.UserError
	switch {
	case errors.As(err, &ue):
		middleware.WriteError(w, ue.Code, ue.Msg)
	case errors.Is(err, secrets.ErrNotFound):
		middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("Secret '%s' not found", r.PathValue("secretID")))
	default:
		a.fail(w, r, err)
	}
}

func (a *api) createSecret(w http.ResponseWriter, r *http.Request) {
	var body newSecretBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.Value == nil {
		middleware.WriteError(w, http.StatusBadRequest, "Secret value is required")
		return
	}
	s, err := a.opts.Secrets.Create(r.Context(), body.Name, *body.Value, body.Metadata)
	if err != nil {
		a.secretFail(w, r, err)
		return
	}
	a.log.Info("secret created", "secret", s.ID, "name", s.Name)
	middleware.WriteJSON(w, http.StatusCreated, toSecretJSON(s))
}

// listSecrets answers GET /secrets?limit&nextToken, oldest first, with
// X-Next-Token (the last secret's id) when there are more.
func (a *api) listSecrets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid limit %q: want 1..100", v))
			return
		}
		limit = n
	}
	after := ""
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) == 0 {
			middleware.WriteError(w, http.StatusBadRequest, "invalid nextToken")
			return
		}
		after = string(b)
	}
	all, err := a.opts.Secrets.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := []secretJSON{}
	skipping := after != ""
	for i, s := range all {
		if skipping {
			skipping = s.ID != after
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(all[i-1].ID)))
			break
		}
		out = append(out, toSecretJSON(s))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

func (a *api) getSecret(w http.ResponseWriter, r *http.Request) {
	s, err := a.opts.Secrets.Get(r.Context(), r.PathValue("secretID"))
	if err != nil {
		a.secretFail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, toSecretJSON(s))
}

func (a *api) updateSecret(w http.ResponseWriter, r *http.Request) {
	var body secretUpdateBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.Value == nil {
		middleware.WriteError(w, http.StatusBadRequest, "Secret value is required")
		return
	}
	s, err := a.opts.Secrets.Update(r.Context(), r.PathValue("secretID"), *body.Value, body.Metadata)
	if err != nil {
		a.secretFail(w, r, err)
		return
	}
	a.log.Info("secret updated", "secret", s.ID, "name", s.Name, "version", s.Version)
	middleware.WriteJSON(w, http.StatusOK, toSecretJSON(s))
}

func (a *api) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := a.opts.Secrets.Delete(r.Context(), r.PathValue("secretID")); err != nil {
		a.secretFail(w, r, err)
		return
	}
	a.log.Info("secret deleted", "secret", r.PathValue("secretID"))
	w.WriteHeader(http.StatusNoContent)
}

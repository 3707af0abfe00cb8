package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// E2B's lifecycle events API and webhook management (spec §12):
// GET /events/sandboxes[/{id}] and /events/webhooks. The events are the
// store's (internal/events records them with the sandbox changes); one API
// key is one team, so every event and webhook is the caller's.

// Events serves the events and webhook API; nil in Options: 503 as E2B
// answers when its events backend is not configured.
type Events struct {
	Store  store.EventStore
	TeamID string
	// CheckURL validates a webhook URL (webhooks.Deliverer.CheckURL); its
	// error is the caller's (400).
	CheckURL func(ctx context.Context, url string) error
	// Secrets seals signing secrets before they are stored
	// (webhooks.Secrets); nil stores them as given.
	Secrets WebhookSecrets
}

// WebhookSecrets seals webhook signing secrets for the store: Seal a new
// secret, Reseal a stored value (sealing a legacy clear one).
type WebhookSecrets interface {
	Seal(id, secret string) (string, error)
	Reseal(id, stored string) (string, error)
}

// sealSecret seals wh.Secret before it is written: fresh (a secret the
// caller just gave) or, else, the stored value re-sealed if it was clear.
func (ev *Events) sealSecret(wh *store.Webhook, fresh bool) error {
	if ev.Secrets == nil {
		return nil
	}
	var err error
	if fresh {
		wh.Secret, err = ev.Secrets.Seal(wh.ID, wh.Secret)
	} else {
		wh.Secret, err = ev.Secrets.Reseal(wh.ID, wh.Secret)
	}
	return err
}

// maxWebhooks is the per-team webhook limit (429 beyond it).
const maxWebhooks = 100

func (a *api) eventRoutes() {
	h := a.mux.HandleFunc
	h("GET /events/sandboxes", a.withEvents(a.listEvents))
	h("GET /events/sandboxes/{id}", a.withEvents(a.listEvents))
	h("POST /events/webhooks", a.withEvents(a.createWebhook))
	h("GET /events/webhooks", a.withEvents(a.listWebhooks))
	h("GET /events/webhooks/{wid}", a.withEvents(a.getWebhook))
	h("PATCH /events/webhooks/{wid}", a.withEvents(a.updateWebhook))
	h("DELETE /events/webhooks/{wid}", a.withEvents(a.deleteWebhook))
	h("GET /events/webhooks/{wid}/deliveries", a.withEvents(a.webhookDeliveries))
	h("GET /events/webhooks/{wid}/stats", a.withEvents(a.webhookStats))
}

func (a *api) withEvents(fn func(w http.ResponseWriter, r *http.Request, ev *Events)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ev := a.opts.Events
		if ev == nil {
			msg := "Sandbox events are not available"
			if strings.HasPrefix(r.URL.Path, "/events/webhooks") {
				msg = "Webhooks are not available"
			}
			middleware.WriteError(w, http.StatusServiceUnavailable, msg)
			return
		}
		fn(w, r, ev)
	}
}

// eventsIntParam parses query parameter name (def when absent) within [lo, hi].
func eventsIntParam(r *http.Request, name string, def, lo, hi int) (int, string) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, ""
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, name + " must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi)
	}
	return n, ""
}

func eventsBoolParam(r *http.Request, name string) (bool, string) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, ""
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, name + " must be true or false"
	}
	return b, ""
}

// eventsListParam collects a repeatable parameter, also as name[] and with
// comma-separated values.
func eventsListParam(r *http.Request, name string) []string {
	var out []string
	for _, k := range []string{name, name + "[]"} {
		for _, v := range r.URL.Query()[k] {
			for _, x := range strings.Split(v, ",") {
				if x = strings.TrimSpace(x); x != "" {
					out = append(out, x)
				}
			}
		}
	}
	return out
}

func (a *api) listEvents(w http.ResponseWriter, r *http.Request, ev *Events) {
	q := store.EventQuery{SandboxID: r.PathValue("id")}
	var bad string
	if q.Offset, bad = eventsIntParam(r, "offset", 0, 0, 1<<30); bad == "" {
		if q.Limit, bad = eventsIntParam(r, "limit", 10, 1, 100); bad == "" {
			q.Asc, bad = eventsBoolParam(r, "orderAsc")
		}
	}
	if bad != "" {
		middleware.WriteError(w, http.StatusBadRequest, bad)
		return
	}
	q.Types = eventsListParam(r, "types")
	for _, t := range q.Types {
		if !events.IsType(t) {
			middleware.WriteError(w, http.StatusBadRequest, "types: unknown event type '"+t+"' (one of "+strings.Join(events.Types, ", ")+")")
			return
		}
	}
	list, err := ev.Store.ListEvents(r.Context(), q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(list) == 0 && q.SandboxID != "" && !a.sandboxKnown(r.Context(), ev, q.SandboxID) {
		middleware.WriteError(w, http.StatusNotFound, "sandbox '"+q.SandboxID+"' not found")
		return
	}
	out := make([]events.SandboxEvent, 0, len(list))
	for _, e := range list {
		out = append(out, events.Wire(e))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// sandboxKnown reports whether id is a live sandbox or has any event.
func (a *api) sandboxKnown(ctx context.Context, ev *Events, id string) bool {
	if a.m != nil {
		if _, err := a.m.Lookup(id); err == nil {
			return true
		}
	}
	es, err := ev.Store.ListEvents(ctx, store.EventQuery{SandboxID: id, Limit: 1})
	return err != nil || len(es) > 0
}

// webhookDetail is E2B's WebhookDetail (and WebhookCreation): never the
// secret.
type webhookDetail struct {
	ID        string   `json:"id"`
	TeamID    string   `json:"teamId"`
	Name      string   `json:"name"`
	CreatedAt string   `json:"createdAt"`
	URL       string   `json:"url"`
	Enabled   bool     `json:"enabled"`
	Events    []string `json:"events"`
}

func detail(ev *Events, wh *store.Webhook) webhookDetail {
	evs := wh.Events
	if evs == nil {
		evs = []string{}
	}
	return webhookDetail{ID: wh.ID, TeamID: ev.TeamID, Name: wh.Name, CreatedAt: wh.CreatedAt.UTC().Format(time.RFC3339Nano),
		URL: wh.URL, Enabled: wh.Enabled, Events: evs}
}

// webhookConfig is WebhookCreate and WebhookConfiguration (PATCH: what is
// present replaces).
type webhookConfig struct {
	Name            *string   `json:"name"`
	URL             *string   `json:"url"`
	Events          *[]string `json:"events"`
	Enabled         *bool     `json:"enabled"`
	SignatureSecret *string   `json:"signatureSecret"`
}

// apply validates c and applies it to wh; create requires every field
// but enabled. It returns the caller's error message, or "".
func (a *api) applyConfig(ctx context.Context, ev *Events, c webhookConfig, wh *store.Webhook, create bool) string {
	if create {
		switch {
		case c.Name == nil:
			return "name is required"
		case c.URL == nil:
			return "url is required"
		case c.Events == nil:
			return "events is required"
		case c.SignatureSecret == nil:
			return "signatureSecret is required"
		}
	}
	if c.Name != nil {
		if strings.TrimSpace(*c.Name) == "" || len(*c.Name) > 256 {
			return "name must be 1 to 256 characters"
		}
		wh.Name = *c.Name
	}
	if c.URL != nil {
		if len(*c.URL) > 2048 {
			return "url is longer than 2048 characters"
		}
		if err := ev.CheckURL(ctx, *c.URL); err != nil {
			return err.Error()
		}
		wh.URL = *c.URL
	}
	if c.Events != nil {
		evs := []string{}
		for _, t := range *c.Events {
			if !events.IsType(t) {
				return "events: unknown event type '" + t + "' (one of " + strings.Join(events.Types, ", ") + ")"
			}
			if !slices.Contains(evs, t) {
				evs = append(evs, t)
			}
		}
		wh.Events = evs
	}
	if c.Enabled != nil {
		wh.Enabled = *c.Enabled
	}
	if c.SignatureSecret != nil {
		if *c.SignatureSecret == "" || len(*c.SignatureSecret) > 1024 {
			return "signatureSecret must be 1 to 1024 characters"
		}
		wh.Secret = *c.SignatureSecret
	}
	return ""
}

func (a *api) createWebhook(w http.ResponseWriter, r *http.Request, ev *Events) {
	var c webhookConfig
	if !decodeBody(w, r, &c, false) {
		return
	}
	wh := &store.Webhook{ID: events.NewID(), Enabled: true, CreatedAt: time.Now().UTC()}
	if msg := a.applyConfig(r.Context(), ev, c, wh, true); msg != "" {
		middleware.WriteError(w, http.StatusBadRequest, msg)
		return
	}
	if err := ev.sealSecret(wh, true); err != nil {
		a.fail(w, r, err)
		return
	}
	all, err := ev.Store.ListWebhooks(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(all) >= maxWebhooks {
		middleware.WriteError(w, http.StatusTooManyRequests, "webhook limit reached ("+strconv.Itoa(maxWebhooks)+" per team)")
		return
	}
	if err := ev.Store.CreateWebhook(r.Context(), wh); err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusCreated, detail(ev, wh))
}

func (a *api) listWebhooks(w http.ResponseWriter, r *http.Request, ev *Events) {
	all, err := ev.Store.ListWebhooks(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]webhookDetail, 0, len(all))
	for _, wh := range all {
		out = append(out, detail(ev, wh))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// webhook reads the webhook of the path, answering 404 itself.
func (a *api) webhook(w http.ResponseWriter, r *http.Request, ev *Events) (*store.Webhook, bool) {
	wh, err := ev.Store.GetWebhook(r.Context(), r.PathValue("wid"))
	if errors.Is(err, store.ErrNotFound) {
		middleware.WriteError(w, http.StatusNotFound, "Webhook not found")
		return nil, false
	}
	if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return wh, true
}

func (a *api) getWebhook(w http.ResponseWriter, r *http.Request, ev *Events) {
	if wh, ok := a.webhook(w, r, ev); ok {
		middleware.WriteJSON(w, http.StatusOK, detail(ev, wh))
	}
}

func (a *api) updateWebhook(w http.ResponseWriter, r *http.Request, ev *Events) {
	wh, ok := a.webhook(w, r, ev)
	if !ok {
		return
	}
	var c webhookConfig
	if !decodeBody(w, r, &c, false) {
		return
	}
	if msg := a.applyConfig(r.Context(), ev, c, wh, false); msg != "" {
		middleware.WriteError(w, http.StatusBadRequest, msg)
		return
	}
	if err := ev.sealSecret(wh, c.SignatureSecret != nil); err != nil {
		a.fail(w, r, err)
		return
	}
	err := ev.Store.UpdateWebhook(r.Context(), wh)
	if errors.Is(err, store.ErrNotFound) {
		middleware.WriteError(w, http.StatusNotFound, "Webhook not found")
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, detail(ev, wh))
}

func (a *api) deleteWebhook(w http.ResponseWriter, r *http.Request, ev *Events) {
	err := ev.Store.DeleteWebhook(r.Context(), r.PathValue("wid"))
	if errors.Is(err, store.ErrNotFound) {
		middleware.WriteError(w, http.StatusNotFound, "Webhook not found")
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK) // E2B answers 200, not 204
}

// eventsTimeParam parses an RFC 3339 query time ("" → zero).
func eventsTimeParam(r *http.Request, name string) (time.Time, string) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return time.Time{}, ""
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, name + " must be an RFC 3339 time"
	}
	return t, ""
}

// webhookDelivery is E2B's WebhookDelivery.
type webhookDelivery struct {
	ID                     string  `json:"id"`
	TeamID                 string  `json:"teamId"`
	WebhookID              string  `json:"webhookId"`
	EventID                string  `json:"eventId"`
	SandboxID              string  `json:"sandboxId"`
	EventType              string  `json:"eventType"`
	Status                 string  `json:"status"`
	DurationMs             int64   `json:"durationMs"`
	RequestBody            string  `json:"requestBody"`
	RequestHeaders         string  `json:"requestHeaders"`
	RequestURL             string  `json:"requestUrl"`
	ResponseBody           *string `json:"responseBody,omitempty"`
	ResponseHeaders        *string `json:"responseHeaders,omitempty"`
	ResponseHTTPStatusCode *int    `json:"responseHttpStatusCode,omitempty"`
	ErrorClass             *string `json:"errorClass"`
	ErrorMessage           *string `json:"errorMessage,omitempty"`
	Timestamp              string  `json:"timestamp"`
}

type deliveryGroup struct {
	EventID   string            `json:"eventId"`
	EventType string            `json:"eventType"`
	SandboxID string            `json:"sandboxId"`
	Attempts  []webhookDelivery `json:"attempts"`
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (a *api) attemptQuery(w http.ResponseWriter, r *http.Request, wh *store.Webhook) (store.AttemptQuery, bool) {
	q := store.AttemptQuery{WebhookID: wh.ID, Status: eventsListParam(r, "deliveryStatus"), EventTypes: eventsListParam(r, "eventType")}
	var bad string
	if q.Start, bad = eventsTimeParam(r, "start"); bad == "" {
		if q.End, bad = eventsTimeParam(r, "end"); bad == "" {
			q.Asc, bad = eventsBoolParam(r, "orderAsc")
		}
	}
	for _, s := range q.Status {
		if s != "success" && s != "failed" {
			bad = "deliveryStatus must be success or failed"
		}
	}
	if bad != "" {
		middleware.WriteError(w, http.StatusBadRequest, bad)
		return q, false
	}
	return q, true
}

func (a *api) webhookDeliveries(w http.ResponseWriter, r *http.Request, ev *Events) {
	wh, ok := a.webhook(w, r, ev)
	if !ok {
		return
	}
	q, ok := a.attemptQuery(w, r, wh)
	if !ok {
		return
	}
	limit, bad := eventsIntParam(r, "limit", 20, 1, 100)
	cursor := 0
	if c := r.URL.Query().Get("cursor"); c != "" && bad == "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			bad = "cursor is not one this API returned"
		}
		cursor = n
	}
	if bad != "" {
		middleware.WriteError(w, http.StatusBadRequest, bad)
		return
	}
	as, err := ev.Store.ListAttempts(r.Context(), q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var groups []*deliveryGroup
	byEvent := map[string]*deliveryGroup{}
	for _, at := range as {
		g := byEvent[at.EventID]
		if g == nil {
			g = &deliveryGroup{EventID: at.EventID, EventType: at.EventType, SandboxID: at.SandboxID, Attempts: []webhookDelivery{}}
			byEvent[at.EventID] = g
			groups = append(groups, g)
		}
		d := webhookDelivery{ID: at.ID, TeamID: ev.TeamID, WebhookID: at.WebhookID, EventID: at.EventID, SandboxID: at.SandboxID,
			EventType: at.EventType, Status: at.Status, DurationMs: at.DurationMs, RequestBody: at.RequestBody,
			RequestHeaders: at.RequestHeaders, RequestURL: at.RequestURL, ErrorClass: optString(at.ErrorClass),
			ErrorMessage: optString(at.ErrorMessage), Timestamp: at.Timestamp.UTC().Format(time.RFC3339Nano)}
		if at.ResponseStatus != 0 {
			code := at.ResponseStatus
			d.ResponseHTTPStatusCode, d.ResponseBody, d.ResponseHeaders = &code, &at.ResponseBody, &at.ResponseHeaders
		}
		g.Attempts = append(g.Attempts, d)
	}
	page := []*deliveryGroup{}
	if cursor < len(groups) {
		page = groups[cursor:min(len(groups), cursor+limit)]
	}
	var next *string
	if cursor+limit < len(groups) {
		s := strconv.Itoa(cursor + limit)
		next = &s
	}
	middleware.WriteJSON(w, http.StatusOK, map[string]any{"data": page, "nextCursor": next})
}

type statsBucket struct {
	Timestamp  string `json:"timestamp"`
	Total      int    `json:"total"`
	Failed     int    `json:"failed"`
	DurationMs int64  `json:"durationMs"`
}

func (a *api) webhookStats(w http.ResponseWriter, r *http.Request, ev *Events) {
	wh, ok := a.webhook(w, r, ev)
	if !ok {
		return
	}
	q, ok := a.attemptQuery(w, r, wh)
	if !ok {
		return
	}
	now := time.Now().UTC()
	if q.End.IsZero() {
		q.End = now
	}
	if q.Start.IsZero() {
		q.Start = q.End.Add(-24 * time.Hour)
	}
	q.Asc = true
	as, err := ev.Store.ListAttempts(r.Context(), q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// Hourly buckets from start; durationMs of a bucket is its average.
	first := q.Start.Truncate(time.Hour)
	var buckets []statsBucket
	sums := []int64{}
	for t := first; !t.After(q.End); t = t.Add(time.Hour) {
		buckets = append(buckets, statsBucket{Timestamp: t.Format(time.RFC3339)})
		sums = append(sums, 0)
	}
	var total, failed int
	var minD, maxD, sum int64
	for i, at := range as {
		k := int(at.Timestamp.Sub(first) / time.Hour)
		if k >= 0 && k < len(buckets) {
			buckets[k].Total++
			sums[k] += at.DurationMs
			if at.Status == "failed" {
				buckets[k].Failed++
			}
		}
		total++
		if at.Status == "failed" {
			failed++
		}
		sum += at.DurationMs
		if i == 0 || at.DurationMs < minD {
			minD = at.DurationMs
		}
		maxD = max(maxD, at.DurationMs)
	}
	for i := range buckets {
		if buckets[i].Total > 0 {
			buckets[i].DurationMs = sums[i] / int64(buckets[i].Total)
		}
	}
	var avg int64
	if total > 0 {
		avg = sum / int64(total)
	}
	middleware.WriteJSON(w, http.StatusOK, map[string]any{"buckets": buckets, "total": total, "failed": failed,
		"durationMs": map[string]int64{"minimum": minD, "average": avg, "maximum": maxD}})
}

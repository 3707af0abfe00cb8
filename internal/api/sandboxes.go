package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// Default timeouts (spec §1.4).
const (
	defaultTimeoutV1      = 15 * time.Second
	defaultTimeoutV2      = 300 * time.Second
	defaultConnectTimeout = 300 * time.Second
)

func (a *api) domain() *string {
	if a.opts.Domain == "" {
		return nil
	}
	d := a.opts.Domain
	return &d
}

func (a *api) toSandbox(sb *sandbox.Sandbox) airlock.SandboxInfo {
	out := airlock.SandboxInfo{
		TemplateID:      sb.TemplateID,
		SandboxID:       sb.ID,
		ClientID:        ClientID,
		EnvdVersion:     sandbox.EnvdVersion,
		Alias:           sb.Alias,
		EnvdAccessToken: sb.AccessToken,
		Domain:          a.domain(),
	}
	if sb.TrafficToken != "" {
		t := sb.TrafficToken
		out.TrafficAccessToken = &t
	}
	return out
}

// toListed is sb as a list entry (E2B's ListedSandbox).
func toListed(sb *sandbox.Sandbox) airlock.ListedSandbox {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return airlock.ListedSandbox{
		TemplateID:   sb.TemplateID,
		Alias:        sb.Alias,
		SandboxID:    sb.ID,
		ClientID:     ClientID,
		StartedAt:    sb.StartedAt.UTC(),
		EndAt:        sb.EndAt.UTC(),
		CPUCount:     sb.CPUCount,
		MemoryMB:     sb.MemoryMB,
		DiskSizeMB:   sb.DiskSizeMB,
		Metadata:     md,
		State:        sb.State,
		EnvdVersion:  sandbox.EnvdVersion,
		VolumeMounts: mountsJSON(sb.VolumeMounts),
	}
}

// toDetail is sb as GET /sandboxes/{id} answers it (E2B's SandboxDetail).
func (a *api) toDetail(sb *sandbox.Sandbox) airlock.SandboxDetail {
	onTimeout := sb.OnTimeout
	if onTimeout == "" {
		onTimeout = "kill"
	}
	allow := sb.AllowInternet
	return airlock.SandboxDetail{
		ListedSandbox:       toListed(sb),
		EnvdAccessToken:     sb.AccessToken,
		Domain:              a.domain(),
		AllowInternetAccess: &allow,
		Network:             toNetworkJSON(sb),
		Lifecycle:           &airlock.Lifecycle{OnTimeout: onTimeout, AutoResume: sb.AutoResume},
	}
}

func (a *api) createV1(w http.ResponseWriter, r *http.Request) { a.create(w, r, false) }
func (a *api) createV2(w http.ResponseWriter, r *http.Request) { a.create(w, r, true) }

func (a *api) create(w http.ResponseWriter, r *http.Request, v2 bool) {
	var body airlock.NewSandboxBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	var rules egressproxy.Rules
	var proxy *sandbox.EgressProxy
	if body.Network != nil {
		var done bool
		if rules, proxy, done = a.checkRulesAndProxy(w, r, body.Network.Rules, body.Network.EgressProxy); done { // network_rules.go
			return
		}
	}
	for field, m := range map[string]map[string]string{"metadata": body.Metadata, "envVars": body.EnvVars} {
		if msg := nulIn(field, m); msg != "" {
			middleware.WriteError(w, http.StatusBadRequest, msg)
			return
		}
	}
	req := sandbox.CreateRequest{
		TemplateID:    body.TemplateID,
		Metadata:      body.Metadata,
		EnvVars:       body.EnvVars,
		AllowInternet: body.AllowInternetAccess,
		Secure:        v2 || (body.Secure != nil && *body.Secure),
		AutoPause:     body.AutoPause != nil && *body.AutoPause,
		// E2B: autoPauseMemory false = lifecycle {onTimeout: pause, keepMemory: false}.
		AutoPauseDiskOnly: body.AutoPauseMemory != nil && !*body.AutoPauseMemory,
		AutoResume:        body.AutoResume != nil && body.AutoResume.Enabled,
		Limits:            toLimits(body.Limits),
		NetworkRules:      rules,
		EgressProxy:       proxy,
	}
	if body.Network != nil {
		req.AllowPublicTraffic = body.Network.AllowPublicTraffic
		if body.Network.MaskRequestHost != nil {
			mask, err := sandbox.ParseMaskRequestHost(*body.Network.MaskRequestHost)
			if err != nil {
				a.fail(w, r, err)
				return
			}
			req.MaskRequestHost = mask
		}
	}
	mounts, err := a.volumeMounts(r.Context(), body.VolumeMounts)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	req.VolumeMounts = mounts
	eg, err := egress(body.Network)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	req.Egress = eg
	if body.Network != nil {
		ap, done := a.parseApproval(w, r, body.Network.Approval) // approvals.go
		if done {
			return
		}
		req.Approval, req.Egress.Hold = ap, ap != nil
	}
	switch {
	case body.Timeout == nil && v2:
		req.Timeout = defaultTimeoutV2
	case body.Timeout == nil:
		req.Timeout = defaultTimeoutV1
	case *body.Timeout <= 0:
		middleware.WriteError(w, http.StatusBadRequest, "timeout must be a positive number of seconds")
		return
	default:
		req.Timeout = time.Duration(*body.Timeout) * time.Second
	}
	if !a.m.Ready() {
		middleware.WriteError(w, http.StatusServiceUnavailable, "not ready: templates are being prepared")
		return
	}
	sb, err := a.m.Create(r.Context(), req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusCreated, a.toSandbox(sb))
}

// pathID returns the {id} path value with a legacy "-<clientID>" suffix
// stripped.
func pathID(r *http.Request) string {
	id := r.PathValue("id")
	if i := strings.IndexByte(id, '-'); i >= 0 {
		id = id[:i]
	}
	return id
}

// live looks the path's sandbox up, or answers 404 and returns false.
func (a *api) live(w http.ResponseWriter, r *http.Request) (*sandbox.Live, bool) {
	sb, err := a.m.Lookup(pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return sb, true
}

// liveFor checks a client-supplied timeout against the daemon's bounds
// (400) before it looks the path's sandbox up (404), so a bad timeout is a
// 400 whether or not the sandbox exists.
func (a *api) liveFor(w http.ResponseWriter, r *http.Request, d time.Duration) (*sandbox.Live, bool) {
	if err := a.m.CheckTimeout(d); err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return a.live(w, r)
}

func (a *api) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	middleware.WriteJSON(w, http.StatusOK, a.toDetail(sb.View()))
}

func (a *api) killSandbox(w http.ResponseWriter, r *http.Request) {
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	if err := sb.Kill(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// seconds converts a client-supplied number of seconds.
func seconds(v int64) time.Duration { return time.Duration(v) * time.Second }

func (a *api) setTimeout(w http.ResponseWriter, r *http.Request) {
	var body airlock.TimeoutBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.Timeout == nil {
		middleware.WriteError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	d := seconds(*body.Timeout)
	sb, ok := a.liveFor(w, r, d)
	if !ok {
		return
	}
	if err := sb.SetTimeout(r.Context(), d); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) refresh(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Duration *int64 `json:"duration"`
	}
	if !decodeBody(w, r, &body, true) {
		return
	}
	var d time.Duration
	if body.Duration != nil {
		if *body.Duration < 0 || *body.Duration > 3600 {
			middleware.WriteError(w, http.StatusBadRequest, "duration must be between 0 and 3600 seconds")
			return
		}
		d = seconds(*body.Duration)
	}
	sb, ok := a.liveFor(w, r, d)
	if !ok {
		return
	}
	if err := sb.Refresh(r.Context(), d); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) connectV1(w http.ResponseWriter, r *http.Request) { a.connect(w, r, false) }
func (a *api) connectV2(w http.ResponseWriter, r *http.Request) { a.connect(w, r, true) }

// connect implements both connect endpoints: v1 (Python) requires a
// timeout, v2 (JS) defaults it to 300 s.
func (a *api) connect(w http.ResponseWriter, r *http.Request, v2 bool) {
	var body airlock.ConnectBody
	if !decodeBody(w, r, &body, v2) {
		return
	}
	d := defaultConnectTimeout
	switch {
	case body.Timeout == nil && !v2:
		middleware.WriteError(w, http.StatusBadRequest, "timeout is required")
		return
	case body.Timeout != nil:
		d = seconds(*body.Timeout)
	}
	e, ok := a.liveFor(w, r, d)
	if !ok {
		return
	}
	sb, resumed, err := e.Connect(r.Context(), d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	middleware.WriteJSON(w, status, a.toSandbox(sb))
}

// resume answers POST /sandboxes/{id}/resume: 201 with the Sandbox when a
// paused sandbox was resumed, 409 when it is running.
func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	var body airlock.TimeoutBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	d := defaultConnectTimeout
	if body.Timeout != nil {
		d = seconds(*body.Timeout)
	}
	e, ok := a.liveFor(w, r, d)
	if !ok {
		return
	}
	sb, err := e.Resume(r.Context(), d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusCreated, a.toSandbox(sb))
}

// pause answers POST /sandboxes/{id}/pause: 204, 409 when already paused.
func (a *api) pause(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if !decodeBody(w, r, &body, true) {
		return
	}
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	pause := sb.Pause
	if body.Memory != nil && !*body.Memory {
		pause = sb.PauseFilesystem // keep the disk only; resume boots fresh
	}
	if err := pause(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// nulIn names the first key or value of m that holds a NUL character ("" if
// none): no process environment can carry one, and PostgreSQL's jsonb, which
// stores metadata in a cluster, refuses it, so it is refused at the door on
// every backend alike.
func nulIn(field string, m map[string]string) string {
	for k, v := range m {
		if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return fmt.Sprintf("%s: key %q: keys and values must not contain a NUL character", field, k)
		}
	}
	return ""
}

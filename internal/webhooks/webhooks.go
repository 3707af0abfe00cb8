package webhooks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/hostaddr"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Defaults of Config.
const (
	DefaultRetryInterval = 10 * time.Second
	DefaultMaxAttempts   = 4
	DefaultTimeout       = 10 * time.Second
	DefaultPoll          = time.Second
)

// Config configures a Deliverer.
type Config struct {
	Store store.EventStore
	// Denies reports a destination no webhook may reach (the daemon's
	// network.Config.Denies); loopback, link-local, unspecified and the
	// host's own addresses are refused besides. AllowPrivate lifts both.
	Denies       func(netip.Addr) (netip.Prefix, bool)
	AllowPrivate bool
	// DenyOut and DenyOutExcept are the operator's --deny-out list (less
	// its exceptions) for a deliverer without Denies (the api tier of a
	// cluster, which links no network code): an IPv4 destination in
	// DenyOut and in no DenyOutExcept entry is refused. Without them
	// (and without Denies) every private address is.
	DenyOut, DenyOutExcept []netip.Prefix
	// Secrets opens the stored signing secrets (nil: only legacy clear
	// ones can be used).
	Secrets *Secrets
	// RetryInterval, MaxAttempts, Timeout (one attempt) and Poll (how
	// often due deliveries are looked for); zero: the defaults.
	RetryInterval time.Duration
	MaxAttempts   int
	Timeout       time.Duration
	Poll          time.Duration
	// Lease is how long a claimed delivery stays this deliverer's (zero:
	// Timeout and 20 s): another deliverer takes it over after that.
	Lease time.Duration
	Log   *slog.Logger
}

// Deliverer sends pending deliveries.
type Deliverer struct {
	cfg    Config
	owner  string // this process's lease owner id
	client *http.Client
	wake   chan struct{}
}

// New returns a Deliverer (Run starts it).
func New(cfg Config) *Deliverer {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	d := &Deliverer{cfg: cfg, owner: events.NewID(), wake: make(chan struct{}, 1)}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: d.control}
	tr := &http.Transport{DialContext: dialer.DialContext, ForceAttemptHTTP2: true, MaxIdleConns: 16,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: cfg.Timeout}
	d.client = &http.Client{Transport: tr, Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return d
}

// Wake makes Run look for due deliveries now.
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// lease is how long a claimed delivery stays this deliverer's: one
// attempt's timeout and a margin.
func (d *Deliverer) lease() time.Duration {
	if d.cfg.Lease > 0 {
		return d.cfg.Lease
	}
	return d.cfg.Timeout + 20*time.Second
}

// Run delivers until ctx ends.
func (d *Deliverer) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			ds, err := d.cfg.Store.ClaimDeliveries(ctx, d.owner, d.lease(), 16)
			if err != nil {
				if ctx.Err() == nil {
					d.cfg.Log.Warn("claiming webhook deliveries", "err", err)
				}
				break
			}
			if len(ds) == 0 {
				break
			}
			done := make(chan struct{}, len(ds))
			for _, dv := range ds {
				go func() {
					defer func() { done <- struct{}{} }()
					d.deliver(ctx, dv)
				}()
			}
			for range ds {
				<-done
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

// Sign is E2B's signature v1: SHA-256 over secret + body, URL-safe base64
// without padding.
func Sign(secret string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(secret))
	h.Write(body)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// deliver makes one attempt of dv and records it.
func (d *Deliverer) deliver(ctx context.Context, dv *store.Delivery) {
	body, _ := json.Marshal(events.Wire(dv.Event))
	a := &store.DeliveryAttempt{ID: events.NewID(), WebhookID: dv.WebhookID, EventID: dv.Event.ID, SandboxID: dv.Event.SandboxID,
		EventType: dv.Event.Type, RequestBody: string(body), RequestURL: dv.URL, Timestamp: time.Now().UTC()}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("User-Agent", "airlock-webhooks")
	hdr.Set("e2b-webhook-id", dv.WebhookID)
	hdr.Set("e2b-delivery-id", a.ID)
	hdr.Set("e2b-signature-version", "v1")
	shown := hdr.Clone()
	shown.Set("e2b-signature", "[redacted]")
	a.RequestHeaders = headerJSON(shown)

	t0 := time.Now()
	secret, err := d.cfg.Secrets.Open(dv.WebhookID, dv.Secret)
	var req *http.Request
	if err == nil {
		hdr.Set("e2b-signature", Sign(secret, body))
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, dv.URL, bytes.NewReader(body))
	} else {
		d.cfg.Log.Error("webhook delivery without its secret", "webhook", dv.WebhookID, "err", err)
	}
	if err == nil {
		req.Header = hdr
		var resp *http.Response
		if resp, err = d.client.Do(req); err == nil {
			rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			a.ResponseStatus, a.ResponseBody, a.ResponseHeaders = resp.StatusCode, string(rb), headerJSON(resp.Header)
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				a.ErrorClass, a.ErrorMessage = "http_error", fmt.Sprintf("the receiver answered %d", resp.StatusCode)
			}
		} else {
			a.ErrorClass, a.ErrorMessage = classify(err), err.Error()
		}
	} else {
		a.ErrorClass, a.ErrorMessage = "request_error", err.Error()
	}
	a.DurationMs = time.Since(t0).Milliseconds()
	if ctx.Err() != nil {
		return // shutting down: the lease runs out and the delivery is due again
	}
	var retryAt time.Time
	if a.ErrorClass == "" {
		a.Status = "success"
	} else {
		a.Status = "failed"
		if dv.Attempts+1 < d.cfg.MaxAttempts {
			retryAt = time.Now().Add(d.cfg.RetryInterval)
		}
	}
	if err := d.cfg.Store.FinishDelivery(context.WithoutCancel(ctx), d.owner, dv, a, retryAt); err != nil {
		d.cfg.Log.Warn("recording a webhook delivery", "event", dv.Event.ID, "webhook", dv.WebhookID, "err", err)
		return
	}
	d.cfg.Log.Debug("webhook delivery", "event", dv.Event.ID, "webhook", dv.WebhookID, "status", a.Status,
		"attempt", dv.Attempts+1, "http", a.ResponseStatus, "err", a.ErrorMessage)
}

func headerJSON(h http.Header) string {
	m := map[string]string{}
	for k, v := range h {
		m[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// classify is E2B's errorClass of a failed request.
func classify(err error) string {
	var dnsErr *net.DNSError
	var ne net.Error
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		return "transport_error"
	case errors.As(err, &dnsErr):
		return "dns_error"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "transport_error"
}

// refusedError is a destination a webhook may not reach.
type refusedError struct {
	addr netip.Addr
	why  string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("refusing to deliver to %s: %s (an operator can allow private webhook URLs with --webhook-allow-private)", e.addr, e.why)
}

// denied reports why a must not be reached, or "".
func (d *Deliverer) denied(a netip.Addr) string {
	if d.cfg.AllowPrivate {
		return ""
	}
	a = a.Unmap()
	if why := hostaddr.Special(a); why != "" {
		return why
	}
	switch {
	case d.cfg.Denies != nil:
		if p, ok := d.cfg.Denies(a); ok {
			return fmt.Sprintf("in %s, a private or denied range", p)
		}
	case a.Is4() && d.cfg.DenyOut != nil:
		if p, ok := denyOut(a, d.cfg.DenyOut, d.cfg.DenyOutExcept); ok {
			return fmt.Sprintf("in %s, a private or denied range", p)
		}
	default:
		if why := hostaddr.Private(a); why != "" {
			return why
		}
	}
	if hostaddr.Own(a, nil) {
		return "an address of this host"
	}
	return ""
}

// denyOut is the range of deny that holds a, unless an entry of except
// at least as long holds it (network.Config.Denies' rule).
func denyOut(a netip.Addr, deny, except []netip.Prefix) (netip.Prefix, bool) {
	for _, e := range except {
		if e.Bits() <= a.BitLen() && e.Contains(a) {
			return netip.Prefix{}, false
		}
	}
	for _, p := range deny {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// control checks the address a delivery is about to connect to, after
// the name was resolved: no rebinding can get past it.
func (d *Deliverer) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook address %q: %w", address, err)
	}
	if why := d.denied(ap.Addr()); why != "" {
		return &refusedError{addr: ap.Addr(), why: why}
	}
	return nil
}

// CheckURL validates a webhook URL at registration: http or https, a host,
// and (unless AllowPrivate) no address the name resolves to is refused.
// Its error is the user's (400).
func (d *Deliverer) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("url must be an absolute http or https URL")
	}
	if d.cfg.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ips, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil {
			return nil // checked again when a delivery connects
		}
	}
	for _, ip := range ips {
		if why := d.denied(ip); why != "" {
			return fmt.Errorf("url %s resolves to %s, %s: webhooks may not reach private networks (an operator can allow it with --webhook-allow-private)", u.Host, ip.Unmap(), why)
		}
	}
	return nil
}

package webhooks

import (
	"net"
	"net/http"
	"time"
)

// HTTPClient returns a client whose connections get the deliverer's
// refusal of private, loopback and the host's own addresses (checked on
// the resolved address, so no rebinding gets past it), for other signed
// calls (the egress approval hook, internal/approval). timeout bounds one
// request.
func (d *Deliverer) HTTPClient(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, Control: d.control}
	tr := &http.Transport{DialContext: dialer.DialContext, ForceAttemptHTTP2: true, MaxIdleConns: 16,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: timeout}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/socksrelay"
)

// EgressProxyOptions enable E2B's network.egressProxy (a SOCKS5 upstream,
// issue 29; internal/socksrelay) on create and PUT network.
type EgressProxyOptions struct {
	// Box seals the proxy's password in the store (the daemon's secrets
	// key, as /secrets values are).
	Box *secretbox.Box
	// AllowPrivate accepts a proxy address that is private or internal
	// (--egress-proxy-allow-private); E2B refuses those.
	AllowPrivate bool
	// Lookup resolves the proxy's host (nil: net.DefaultResolver).
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// egressProxyBody is network.egressProxy on the wire.
type egressProxyBody struct {
	Address  *string `json:"address"`
	Username *string `json:"username"`
	Password *string `json:"password"`
}

// badProxy is the 400 message of a refused egressProxy (E2B's wording).
func badProxy(format string, args ...any) string {
	return "Invalid egress proxy config: " + fmt.Sprintf(format, args...)
}

// proxyAD binds a sealed password to its proxy and user.
func proxyAD(address, username string) []byte {
	return []byte("airlock egressProxy\x00" + address + "\x00" + username)
}

// OpenProxyPassword opens the password the API sealed into p ("" without
// one): the node's SOCKS relay calls it per connection.
func OpenProxyPassword(box *secretbox.Box, p *sandbox.EgressProxy) (string, error) {
	if p == nil || p.PasswordSealed == "" {
		return "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(p.PasswordSealed)
	if err != nil {
		return "", fmt.Errorf("egress proxy password: %w", err)
	}
	pw, err := box.Open(raw, proxyAD(p.Address, p.Username))
	if err != nil {
		return "", fmt.Errorf("egress proxy password: %w", err)
	}
	return string(pw), nil
}

// parseEgressProxy checks network.egressProxy and returns what the sandbox
// keeps (nil for null), or a 400 message.
func (a *api) parseEgressProxy(ctx context.Context, raw json.RawMessage) (*sandbox.EgressProxy, string, error) {
	o := a.opts.EgressProxy
	if o == nil || o.Box == nil {
		return nil, badProxy("egress proxies are not enabled on this node (it runs no SOCKS relay)"), nil
	}
	var b egressProxyBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, badProxy("want {address, username?, password?}: %v", err), nil
	}
	if b.Address == nil || strings.TrimSpace(*b.Address) == "" {
		return nil, badProxy("address is required (host:port)"), nil
	}
	addr := strings.TrimSpace(*b.Address)
	host, portStr, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(portStr)
	if err != nil || host == "" || perr != nil || port < 1 || port > 65535 {
		return nil, badProxy("address %q is not host:port", addr), nil
	}
	var user, pass string
	if b.Username != nil {
		user = *b.Username
	}
	if b.Password != nil {
		pass = *b.Password
	}
	if len(user) > 255 {
		return nil, badProxy("username is longer than 255 bytes"), nil
	}
	if len(pass) > 255 {
		return nil, badProxy("password is longer than 255 bytes"), nil
	}
	if pass != "" && user == "" {
		return nil, badProxy("a password needs a username (RFC 1929)"), nil
	}
	addrs, msg := a.resolveProxy(ctx, host)
	if msg != "" {
		return nil, msg, nil
	}
	if !o.AllowPrivate {
		for _, ip := range addrs {
			if socksrelay.Internal(ip) {
				return nil, badProxy("address %s resolves to a private or internal address (%s)", addr, ip), nil
			}
		}
	}
	p := &sandbox.EgressProxy{Address: addr, Username: user}
	if pass != "" {
		sealed, err := o.Box.Seal([]byte(pass), proxyAD(addr, user))
		if err != nil {
			return nil, "", fmt.Errorf("sealing the egress proxy password: %w", err)
		}
		p.PasswordSealed = base64.StdEncoding.EncodeToString(sealed)
	}
	return p, "", nil
}

// resolveProxy resolves host (an IP stays itself), or returns a 400.
func (a *api) resolveProxy(ctx context.Context, host string) ([]netip.Addr, string) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lookup := a.opts.EgressProxy.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := lookup(ctx, host)
	if err != nil || len(addrs) == 0 {
		return nil, badProxy("address %s does not resolve", host)
	}
	return addrs, ""
}

package network

import (
	"net/netip"
	"strings"
	"sync"
)

// proxyNames remembers, per sandbox with an egressProxy, the name each
// address it resolved through the DNS filter was answered for, so the
// SOCKS relay can ask the proxy for the name (remote DNS, as a SOCKS
// client with socks5h would) rather than the address.
type proxyNames struct {
	mu sync.Mutex
	// byID: sandbox id → address → name (the latest answer wins).
	byID map[string]map[netip.Addr]string
}

func (p *proxyNames) note(id, name string, addrs []netip.Addr) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = map[string]map[netip.Addr]string{}
	}
	m := p.byID[id]
	if m == nil {
		m = map[netip.Addr]string{}
		p.byID[id] = m
	}
	for _, a := range addrs {
		m[a.Unmap()] = name
	}
}

func (p *proxyNames) lookup(id string, a netip.Addr) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byID[id][a.Unmap()]
}

func (p *proxyNames) drop(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byID, id)
}

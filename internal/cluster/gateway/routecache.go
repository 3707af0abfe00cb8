package gateway

import (
	"context"
	"sync"
	"time"
)

// routeCache maps sandbox ids to their node ids. It is used only while the
// store's route notifications are being watched (watching): an entry is
// dropped when its sandbox's row changes, every entry on a resync or when
// the watch breaks.
type routeCache struct {
	mu       sync.RWMutex
	m        map[string]string
	watching bool
	// epoch counts drops: a store read that raced one is not cached (it
	// may predate the change).
	epoch uint64
}

func (c *routeCache) get(id string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.watching {
		return "", false
	}
	n, ok := c.m[id]
	return n, ok
}

func (c *routeCache) now() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.epoch
}

// put caches a route read from the store when no drop happened since
// epoch; past maxRouteCache entries it starts over.
func (c *routeCache) put(id, node string, epoch uint64) {
	c.mu.Lock()
	if c.watching && c.epoch == epoch {
		if len(c.m) >= maxRouteCache {
			clear(c.m)
		}
		c.m[id] = node
	}
	c.mu.Unlock()
}

func (c *routeCache) drop(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.epoch++
	c.mu.Unlock()
}

// reset drops every entry and sets whether the cache may be used.
func (c *routeCache) reset(watching bool) {
	c.mu.Lock()
	clear(c.m)
	c.watching = watching
	c.epoch++
	c.mu.Unlock()
}

// maxRouteCache bounds the cache; past it, it starts over.
const maxRouteCache = 1 << 20

// ttlSet remembers sandbox ids for ttlSetTTL (at most maxTTLSet of them):
//   - Gateway.unknown: ids the store does not know (nor lost), so that
//     traffic to made-up ids (scanners, a client retrying a killed sandbox)
//     costs the database nothing after the first request. Ids are random:
//     an id asked for before it exists is not one a client got from a
//     create, so caching its absence misleads no one;
//   - Gateway.stay: running sandboxes of a draining node, which ownerOrMove
//     would otherwise look up on every request.
type ttlSet struct {
	mu sync.Mutex
	m  map[string]time.Time // id → until
}

const (
	ttlSetTTL = 5 * time.Second
	maxTTLSet = 1 << 16
)

func (c *ttlSet) has(id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.m[id]
	if ok && now.After(until) {
		delete(c.m, id)
		return false
	}
	return ok
}

func (c *ttlSet) del(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

func (c *ttlSet) add(id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxTTLSet {
		c.m = map[string]time.Time{}
	}
	c.m[id] = now.Add(ttlSetTTL)
}

// sandboxNode returns the node owning a sandbox, from the cache or the
// store (cluster.ErrNotFound when it has none).
func (g *Gateway) sandboxNode(ctx context.Context, id string) (string, error) {
	if n, ok := g.routes.get(id); ok {
		return n, nil
	}
	epoch := g.routes.now()
	n, err := g.store.SandboxNode(ctx, id)
	if err != nil {
		return "", err
	}
	g.routes.put(id, n, epoch)
	return n, nil
}

// runRouteWatch keeps the route cache coherent with the store's
// notifications, watching again (after a pause) when the watch breaks.
func (g *Gateway) runRouteWatch(ctx context.Context) {
	defer g.routes.reset(false)
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := g.store.WatchRoutes(wctx)
		if err != nil {
			cancel()
			g.log.Warn("watching sandbox routes (the route cache is off)", "err", err)
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		g.routes.reset(true)
		for ch != nil {
			select {
			case <-ctx.Done():
				ch = nil
			case rc, ok := <-ch:
				switch {
				case !ok:
					ch = nil
				case rc.Resync:
					g.routes.reset(true)
				default:
					g.routes.drop(rc.SandboxID)
				}
			}
		}
		cancel()
		g.routes.reset(false)
		if ctx.Err() == nil {
			g.log.Warn("the sandbox route watch ended; watching again")
			if !sleep(ctx, 200*time.Millisecond) {
				return
			}
		}
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package activity

// Arriving is called when sandbox id comes to this daemon from another
// node (a drain, a move, a resume on another node), before it runs here.
// Its entries stay on the node it left (which drops them with the
// sandbox); here its feed numbers from the current time in microseconds
// (about 1.8e15, within a JavaScript number's exact range) unless it is
// already past that, which is more than any node can have numbered before
// (one entry per microsecond since 1970). So ids keep growing across
// nodes: a client that follows the feed through the api tier with
// ?since= or Last-Event-ID misses none of the new node's entries and gets
// none twice.
func (h *Hub) Arriving(id string) {
	if h == nil {
		return
	}
	base := uint64(h.opts.Now().UnixMicro())
	f := h.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next < base {
		f.next = base
	}
}

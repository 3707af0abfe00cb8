package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Request is what a create needs from a node.
type Request struct {
	Template string // template id; the node holding it (and its warm pool) is preferred
	Resources
	Labels  []string // every one must be on the node, e.g. "kvm"
	Runtime string   // "" for any runtime kind
	// TemplateRequired refuses the nodes that do not hold Template (nodes
	// that cannot pull templates from one another yet).
	TemplateRequired bool
	// Exclude names nodes not to use (a create that could not reach one
	// is placed again without it).
	Exclude []string
}

func (r Request) describe() string {
	s := fmt.Sprintf("%d CPUs, %d MiB memory", r.CPUCount, r.MemoryMB)
	if r.DiskMB > 0 {
		s += fmt.Sprintf(", %d MiB disk", r.DiskMB)
	}
	if len(r.Labels) > 0 {
		s += ", labels " + strings.Join(r.Labels, ",")
	}
	if r.Runtime != "" {
		s += ", runtime " + r.Runtime
	}
	if r.Template != "" {
		s += ", template " + r.Template
		if r.TemplateRequired {
			s += " (required)"
		}
	}
	return s
}

func (r Request) validate() error {
	if r.CPUCount <= 0 || r.MemoryMB <= 0 || r.DiskMB < 0 {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, r.describe())
	}
	return nil
}

// Config tunes a Placer. Zero fields take the defaults.
type Config struct {
	// K is how many nodes are drawn per pool (all nodes, holders of the
	// template, nodes with a warm sandbox of it). Default 3.
	K int
	// Seed seeds the sampling; 0 picks a random seed. Tests set it.
	Seed uint64
	// InFlightCost is added to a node's score per create in flight there
	// (a create costs CPU beyond its steady share). Default 0.01.
	InFlightCost float64
	// TemplateMissCost is added when the node does not hold the template
	// (it must pull it first). Default 0.05.
	TemplateMissCost float64
	// WarmBonus is subtracted when a warm-pool sandbox of the template is
	// ready on the node (a claim instead of a boot). Default 0.1.
	WarmBonus float64
}

// Placer places sandboxes on nodes. It is safe for concurrent use.
type Placer struct {
	k                      int
	inFlightCost, missCost float64
	warmBonus              float64
	mu                     sync.Mutex // guards everything below
	rng                    *rand.Rand
	nodes                  []*node // every known node, any state; node.pos is its index
	byID                   map[string]*node
	holders                map[string]*nodeSet // template → nodes holding it
	warm                   map[string]*nodeSet // template → nodes whose heartbeat had a warm sandbox of it
	stamp                  uint64              // per Place call, to draw each node once
}

type node struct {
	Node
	pos int
	// pinned is the state SetState set (Draining or Lost), which heartbeats
	// do not undo; Live when none. hbState is the last heartbeat's own.
	// Node.State is pinned when set, else hbState.
	pinned, hbState State
	templates       map[string]struct{}
	removed         bool
	seen            uint64

	inFlight        Resources
	inFlightCreates int
	inFlightWarm    map[string]int // template → creates placed here to claim a warm sandbox

	// confirms are the confirmed creates no heartbeat received so far
	// counts; confirmed, confirmedCreates and confirmedWarm are their sums.
	confirms         []confirmation
	confirmed        Resources
	confirmedCreates int
	confirmedWarm    map[string]int
}

// confirmation is a create that succeeded on a node, counted until a
// heartbeat of generation gen or later arrives.
type confirmation struct {
	gen      uint64
	res      Resources
	template string
	warm     bool // it claimed a warm-pool sandbox of template
}

// New returns an empty Placer.
func New(cfg Config) *Placer {
	p := &Placer{
		k:            cfg.K,
		inFlightCost: cfg.InFlightCost,
		missCost:     cfg.TemplateMissCost,
		warmBonus:    cfg.WarmBonus,
		byID:         map[string]*node{},
		holders:      map[string]*nodeSet{},
		warm:         map[string]*nodeSet{},
	}
	if p.k <= 0 {
		p.k = 3
	}
	if p.inFlightCost == 0 {
		p.inFlightCost = 0.01
	}
	if p.missCost == 0 {
		p.missCost = 0.05
	}
	if p.warmBonus == 0 {
		p.warmBonus = 0.1
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	p.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return p
}

// Update records a node's heartbeat, adding the node if it is new. The
// heartbeat replaces what the node holds (Reserved, Sandboxes, Templates,
// WarmPool); confirmed creates of its generation or earlier stop counting on
// their own, since the node now reports them, and later ones keep counting.
// Creates in flight keep counting until they end. A heartbeat older (by
// Gen) than one already received is ignored: it was delivered out of order.
func (p *Placer) Update(n Node) error {
	if err := n.validate(); err != nil {
		return err
	}
	n = n.clone()
	p.mu.Lock()
	defer p.mu.Unlock()
	nd := p.byID[n.ID]
	if nd != nil && n.Gen < nd.Gen {
		return nil
	}
	if nd == nil {
		nd = &node{pos: len(p.nodes), templates: map[string]struct{}{}, inFlightWarm: map[string]int{}, confirmedWarm: map[string]int{}}
		p.nodes = append(p.nodes, nd)
		p.byID[n.ID] = nd
	}
	pending := map[string]bool{} // templates of creates this heartbeat does not count yet
	for _, c := range nd.confirms {
		if c.gen > n.Gen && c.template != "" {
			pending[c.template] = true
		}
	}
	for t := range nd.templates { // held at the last heartbeat or pulled since, and not in this one
		if !slices.Contains(n.Templates, t) && !pending[t] {
			delete(nd.templates, t)
			p.holders[t].remove(nd)
		}
	}
	for _, t := range n.Templates {
		if _, ok := nd.templates[t]; !ok {
			nd.templates[t] = struct{}{}
			setFor(p.holders, t).add(nd)
		}
	}
	for t, c := range nd.WarmPool {
		if c > 0 && n.WarmPool[t] <= 0 {
			p.warm[t].remove(nd)
		}
	}
	for t, c := range n.WarmPool {
		if c > 0 && nd.WarmPool[t] <= 0 {
			setFor(p.warm, t).add(nd)
		}
	}
	nd.Node = n
	nd.hbState = n.State
	if nd.pinned != Live {
		nd.State = nd.pinned
	}
	kept := nd.confirms[:0]
	for _, c := range nd.confirms {
		if c.gen > n.Gen {
			kept = append(kept, c)
			continue
		}
		nd.confirmed = nd.confirmed.Sub(c.res)
		nd.confirmedCreates--
		if c.warm {
			if nd.confirmedWarm[c.template]--; nd.confirmedWarm[c.template] == 0 {
				delete(nd.confirmedWarm, c.template)
			}
		}
	}
	clear(nd.confirms[len(kept):])
	nd.confirms = kept
	return nil
}

// SetState changes a node's state without a heartbeat (marking it lost when
// its heartbeats stop, draining on `airlock node drain`). Draining and Lost
// stay until SetState(id, Live), whatever the node's heartbeats say; then
// the node's own state counts again (a node that says it drains is not
// given sandboxes).
func (p *Placer) SetState(id string, s State) error {
	if s < Live || s > Lost {
		return fmt.Errorf("%w: node %s: unknown state %d", ErrInvalidNode, id, int(s))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	nd := p.byID[id]
	if nd == nil {
		return fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	nd.pinned = s
	nd.State = s
	if s == Live {
		nd.State = nd.hbState
	}
	return nil
}

// Remove forgets a node. Reservations on it end as no-ops.
func (p *Placer) Remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	nd := p.byID[id]
	if nd == nil {
		return
	}
	for t := range nd.templates {
		p.holders[t].remove(nd)
	}
	for t, c := range nd.WarmPool {
		if c > 0 {
			p.warm[t].remove(nd)
		}
	}
	last := p.nodes[len(p.nodes)-1]
	p.nodes[nd.pos], last.pos = last, nd.pos
	p.nodes = p.nodes[:len(p.nodes)-1]
	delete(p.byID, id)
	nd.removed = true
}

// Status returns every node as the placer sees it, sorted by id.
func (p *Placer) Status() []NodeStatus {
	p.mu.Lock()
	out := make([]NodeStatus, 0, len(p.nodes))
	for _, nd := range p.nodes {
		out = append(out, nd.status())
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// NodeStatus returns one node as the placer sees it.
func (p *Placer) NodeStatus(id string) (NodeStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	nd := p.byID[id]
	if nd == nil {
		return NodeStatus{}, false
	}
	return nd.status(), true
}

func (nd *node) status() NodeStatus {
	s := NodeStatus{
		Node:            nd.Node.clone(),
		InFlight:        nd.inFlight,
		InFlightCreates: nd.inFlightCreates,
		Confirmed:       nd.confirmed, ConfirmedCreates: nd.confirmedCreates,
	}
	s.Templates = s.Templates[:0]
	for t := range nd.templates { // the heartbeat's, and those pulled since
		s.Templates = append(s.Templates, t)
	}
	sort.Strings(s.Templates)
	for t, c := range nd.confirmedWarm {
		if s.WarmPool != nil {
			s.WarmPool[t] = max(0, s.WarmPool[t]-c)
		}
	}
	return s
}

// Place picks a node for req and reserves req's resources there until the
// returned reservation is confirmed or released. It returns a *RefusedError
// (errors.Is ErrNoCapacity) when no node can take req, and an error matching
// ErrInvalidRequest for a request without CPU or memory.
func (p *Placer) Place(req Request) (*Reservation, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stamp++
	c := choice{score: math.Inf(1)}
	if !req.TemplateRequired { // else only holders can fit: drawn below
		p.draw(&c, p.nodes, req)
	}
	// The holders are drawn from when they are not every node (else the
	// draw above covered them), and always when only they can fit: a
	// template on every node otherwise fell through to the full scan, a
	// least-loaded choice that sends every api instance's creates to the
	// same node (found in review).
	if s := p.holders[req.Template]; s != nil && (req.TemplateRequired || len(s.nodes) < len(p.nodes)) {
		p.draw(&c, s.nodes, req)
	}
	if s := p.warm[req.Template]; s != nil {
		p.draw(&c, s.nodes, req)
	}
	if c.node == nil {
		if err := p.scan(&c, req); err != nil {
			return nil, err
		}
	}
	nd := c.node
	nd.inFlight = nd.inFlight.Add(req.Resources)
	nd.inFlightCreates++
	if c.warm {
		nd.inFlightWarm[req.Template]++
	}
	return &Reservation{p: p, n: nd, id: nd.ID, req: req, warm: c.warm}, nil
}

type choice struct {
	node  *node
	score float64
	warm  bool
}

func (c *choice) offer(nd *node, score float64, warm bool) {
	if score < c.score {
		c.node, c.score, c.warm = nd, score, warm
	}
}

// draw samples up to k fitting nodes from pool (each node once per Place),
// giving up after 4k draws, and offers them to c.
func (p *Placer) draw(c *choice, pool []*node, req Request) {
	if len(pool) == 0 {
		return
	}
	found := 0
	for tries := 0; found < p.k && tries < 4*p.k; tries++ {
		nd := pool[p.rng.IntN(len(pool))]
		if nd.seen == p.stamp {
			continue
		}
		nd.seen = p.stamp
		if nd.check(req, nil) != fits {
			continue
		}
		score, warm := p.score(nd, req)
		c.offer(nd, score, warm)
		found++
	}
}

// scan offers every fitting node to c; when none fits, it returns the
// refusal, with the reasons counted over all nodes.
func (p *Placer) scan(c *choice, req Request) error {
	refusal := &RefusedError{Request: req, Nodes: len(p.nodes), MostFree: Resources{CPUCount: math.MinInt, MemoryMB: math.MinInt64, DiskMB: math.MinInt64}}
	for _, nd := range p.nodes {
		if nd.check(req, refusal) == fits {
			score, warm := p.score(nd, req)
			c.offer(nd, score, warm)
		}
	}
	if c.node != nil {
		return nil
	}
	if refusal.Matching == 0 {
		refusal.MostFree = Resources{}
	}
	return refusal
}

type verdict int

const (
	fits verdict = iota
	notLive
	excluded
	wrongRuntime
	missingLabel
	missingTemplate
	short
)

// check says whether req fits on nd, and counts why not into r when r is
// not nil.
func (nd *node) check(req Request, r *RefusedError) verdict {
	switch nd.State {
	case Draining:
		if r != nil {
			r.Draining++
		}
		return notLive
	case Lost:
		if r != nil {
			r.Lost++
		}
		return notLive
	}
	if slices.Contains(req.Exclude, nd.ID) {
		if r != nil {
			r.Excluded++
		}
		return excluded
	}
	if req.Runtime != "" && nd.Runtime != req.Runtime {
		if r != nil {
			r.WrongRuntime++
		}
		return wrongRuntime
	}
	missing := false
	for _, l := range req.Labels {
		if !slices.Contains(nd.Labels, l) {
			missing = true
			if r == nil {
				break
			}
			if r.MissingLabel == nil {
				r.MissingLabel = map[string]int{}
			}
			r.MissingLabel[l]++
		}
	}
	if missing {
		if r != nil {
			r.MissingLabels++
		}
		return missingLabel
	}
	if req.TemplateRequired {
		if _, ok := nd.templates[req.Template]; !ok {
			if r != nil {
				r.MissingTemplate++
			}
			return missingTemplate
		}
	}
	committed := nd.Reserved.Add(nd.inFlight).Add(nd.confirmed)
	free := nd.Capacity.Sub(committed)
	ok := true
	if free.CPUCount < req.CPUCount {
		ok = false
		if r != nil {
			r.ShortCPU++
		}
	}
	if free.MemoryMB < req.MemoryMB {
		ok = false
		if r != nil {
			r.ShortMemory++
		}
	}
	if nd.Capacity.DiskMB > 0 && free.DiskMB < req.DiskMB {
		ok = false
		if r != nil {
			r.ShortDisk++
		}
	}
	if nd.MaxSandboxes > 0 && nd.Sandboxes+nd.inFlightCreates+nd.confirmedCreates >= nd.MaxSandboxes {
		ok = false
		if r != nil {
			r.AtMaxCount++
		}
	}
	if r != nil {
		r.Matching++
		r.MostFree.CPUCount = max(r.MostFree.CPUCount, free.CPUCount)
		r.MostFree.MemoryMB = max(r.MostFree.MemoryMB, free.MemoryMB)
		r.MostFree.DiskMB = max(r.MostFree.DiskMB, free.DiskMB)
		// The node's free slot as NodeStatus.Free counts it, without
		// copying the node.
		slot := Resources{CPUCount: max(free.CPUCount, 0), MemoryMB: max(free.MemoryMB, 0), DiskMB: max(free.DiskMB, 0)}
		if nd.MaxSandboxes > 0 && nd.Sandboxes+nd.inFlightCreates+nd.confirmedCreates >= nd.MaxSandboxes {
			slot = Resources{}
		}
		if l := r.Largest; r.LargestNode == "" || slot.CPUCount > l.CPUCount || (slot.CPUCount == l.CPUCount && slot.MemoryMB > l.MemoryMB) ||
			(slot == l && nd.ID < r.LargestNode) {
			r.Largest, r.LargestNode = slot, nd.ID
		}
	}
	if !ok {
		return short
	}
	return fits
}

// score rates a fitting node for req: lower is better. It also says whether
// a warm-pool sandbox of req's template is ready there for this create.
func (p *Placer) score(nd *node, req Request) (float64, bool) {
	after := nd.Reserved.Add(nd.inFlight).Add(nd.confirmed).Add(req.Resources)
	load := max(frac(after.CPUCount, nd.Capacity.CPUCount), frac(int(after.MemoryMB), int(nd.Capacity.MemoryMB)))
	if nd.Capacity.DiskMB > 0 {
		load = max(load, frac(int(after.DiskMB), int(nd.Capacity.DiskMB)))
	}
	s := load + p.inFlightCost*float64(nd.inFlightCreates)
	if req.Template == "" {
		return s, false
	}
	if _, ok := nd.templates[req.Template]; !ok {
		s += p.missCost
	}
	warm := nd.WarmPool[req.Template]-nd.inFlightWarm[req.Template]-nd.confirmedWarm[req.Template] > 0
	if warm {
		s -= p.warmBonus
	}
	return s, warm
}

func frac(a, b int) float64 { return float64(a) / float64(b) }

// Reservation is a placed create's hold on its node. End it exactly once
// with Confirm (the sandbox runs there) or Release (the create failed);
// later calls do nothing.
type Reservation struct {
	p    *Placer
	n    *node
	id   string
	req  Request
	warm bool
	done bool // guarded by p.mu
}

// NodeID is the node the create goes to.
func (r *Reservation) NodeID() string { return r.id }

// Warm says the node had a warm-pool sandbox of the template ready for this
// create when it was placed.
func (r *Reservation) Warm() bool { return r.warm }

// Confirm ends the reservation of a create that succeeded: its resources
// move from in flight to confirmed, counted until a heartbeat of generation
// gen or later (one that reports the sandbox itself) arrives; the node now
// holds the template, and a warm sandbox it claimed is no longer offered.
//
// gen is the generation the node's create response carries (see
// Node.Gen). 0, for a node that gave none, stands for the generation after
// the last heartbeat received: then a heartbeat sampled before the create
// ended but delivered after this call, if it is the next one, frees the
// create's resources too early; with the node's generation it cannot.
func (r *Reservation) Confirm(gen uint64) { r.end(true, gen) }

// Release ends the reservation of a create that failed: its resources are
// free again.
func (r *Reservation) Release() { r.end(false, 0) }

func (r *Reservation) end(confirm bool, gen uint64) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	nd := r.n
	if nd.removed {
		return
	}
	nd.inFlight = nd.inFlight.Sub(r.req.Resources)
	nd.inFlightCreates--
	if r.warm {
		nd.inFlightWarm[r.req.Template]--
	}
	if !confirm {
		return
	}
	if gen == 0 {
		gen = nd.Gen + 1
	}
	if gen > nd.Gen { // else a heartbeat received already counts it
		nd.confirms = append(nd.confirms, confirmation{gen: gen, res: r.req.Resources, template: r.req.Template, warm: r.warm})
		nd.confirmed = nd.confirmed.Add(r.req.Resources)
		nd.confirmedCreates++
		if r.warm {
			nd.confirmedWarm[r.req.Template]++
		}
	}
	if t := r.req.Template; t != "" {
		if _, ok := nd.templates[t]; !ok {
			nd.templates[t] = struct{}{}
			setFor(p.holders, t).add(nd)
		}
	}
}

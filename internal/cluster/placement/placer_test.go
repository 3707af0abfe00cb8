package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mkNode(id string, cpus int, memMB int64, opts ...func(*Node)) Node {
	n := Node{ID: id, Gen: 1, Runtime: "gvisor", Capacity: Resources{CPUCount: cpus, MemoryMB: memMB}}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func withLabels(l ...string) func(*Node) { return func(n *Node) { n.Labels = l } }
func withState(s State) func(*Node)      { return func(n *Node) { n.State = s } }
func withReserved(cpus int, memMB int64) func(*Node) {
	return func(n *Node) { n.Reserved = Resources{CPUCount: cpus, MemoryMB: memMB} }
}
func withTemplates(t ...string) func(*Node) { return func(n *Node) { n.Templates = t } }
func withWarm(t string, c int) func(*Node) {
	return func(n *Node) { n.WarmPool = map[string]int{t: c} }
}

func newPlacer(t testing.TB, cfg Config, nodes ...Node) *Placer {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	p := New(cfg)
	for _, n := range nodes {
		if err := p.Update(n); err != nil {
			t.Fatalf("Update(%s): %v", n.ID, err)
		}
	}
	return p
}

func req(cpus int, memMB int64) Request {
	return Request{Template: "base", Resources: Resources{CPUCount: cpus, MemoryMB: memMB}}
}

func mustPlace(t testing.TB, p *Placer, r Request) *Reservation {
	t.Helper()
	res, err := p.Place(r)
	if err != nil {
		t.Fatalf("Place(%s): %v", r.describe(), err)
	}
	return res
}

func checkNoOverCommit(t *testing.T, p *Placer) {
	t.Helper()
	for _, s := range p.Status() {
		c := s.Committed()
		if c.CPUCount > s.Capacity.CPUCount || c.MemoryMB > s.Capacity.MemoryMB || (s.Capacity.DiskMB > 0 && c.DiskMB > s.Capacity.DiskMB) {
			t.Errorf("node %s committed %+v past its capacity %+v", s.ID, c, s.Capacity)
		}
	}
}

// A burst of 1,000 concurrent creates against 80 CPUs of capacity: exactly
// 80 are placed, none past any node's limits, the rest refused for CPU.
func TestBurstNeverOverCommits(t *testing.T) {
	var nodes []Node
	for i := range 10 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%d", i), 8, 16384))
	}
	p := newPlacer(t, Config{}, nodes...)
	const burst = 1000
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		placed  []*Reservation
		refused int
		other   []error
	)
	start := make(chan struct{})
	for range burst {
		wg.Go(func() {
			<-start
			r, err := p.Place(req(1, 1024))
			mu.Lock()
			defer mu.Unlock()
			var re *RefusedError
			switch {
			case err == nil:
				placed = append(placed, r)
			case errors.As(err, &re) && slices.Equal(re.Short(), []string{"cpu"}):
				refused++
			default:
				other = append(other, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected errors: %v", other[0])
	}
	if len(placed) != 80 || refused != burst-80 {
		t.Fatalf("placed %d, refused %d; want 80 placed (10 nodes × 8 CPUs), %d refused", len(placed), refused, burst-80)
	}
	checkNoOverCommit(t, p)
	for _, s := range p.Status() {
		if s.InFlightCreates != 8 {
			t.Errorf("node %s has %d creates in flight, want 8 (full)", s.ID, s.InFlightCreates)
		}
	}

	// Churn: creates end (half confirmed, half released), heartbeats report
	// what the confirmed ones hold, and new creates of mixed sizes race them;
	// never past a limit. (truth is what each node runs; a create confirmed
	// and the heartbeat that reports it are ordered by truthMu, as a node's
	// own heartbeat follows the creates it finished.)
	var (
		truthMu sync.Mutex
		truth   = map[string]Resources{}
	)
	confirm := func(r *Reservation) {
		truthMu.Lock()
		defer truthMu.Unlock()
		r.Confirm(0)
		truth[r.NodeID()] = truth[r.NodeID()].Add(r.req.Resources)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	sizes := make([]Request, burst)
	for i := range sizes {
		sizes[i] = req(1+rng.IntN(4), int64(512*(1+rng.IntN(8))))
	}
	var more []*Reservation
	for i, r := range placed {
		wg.Go(func() {
			if i%2 == 0 {
				confirm(r)
			} else {
				r.Release()
			}
		})
	}
	for i := range burst {
		wg.Go(func() {
			if i%50 == 0 {
				truthMu.Lock()
				defer truthMu.Unlock()
				nodes[(i/50)%len(nodes)].Gen++
				n := nodes[(i/50)%len(nodes)]
				n.Reserved = truth[n.ID]
				if err := p.Update(n); err != nil {
					t.Error(err)
				}
				return
			}
			r, err := p.Place(sizes[i])
			if err != nil {
				if !errors.Is(err, ErrNoCapacity) {
					t.Errorf("Place: %v", err)
				}
				return
			}
			if i%3 == 0 {
				confirm(r)
				return
			}
			mu.Lock()
			more = append(more, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	checkNoOverCommit(t, p)
	for id, r := range truth {
		if s, _ := p.NodeStatus(id); r.CPUCount > s.Capacity.CPUCount || r.MemoryMB > s.Capacity.MemoryMB {
			t.Errorf("node %s runs %+v past its capacity %+v", id, r, s.Capacity)
		}
	}
	if len(more) == 0 {
		t.Fatal("no create placed after the churn")
	}
	for _, r := range more {
		r.Release()
	}
	checkNoOverCommit(t, p)
}

// Creates placed before any of them ends spread over the nodes instead of
// all going to the one that looked emptiest.
func TestReservationsSpreadBurst(t *testing.T) {
	t.Run("sequential, 100 nodes", func(t *testing.T) {
		var nodes []Node
		for i := range 100 {
			nodes = append(nodes, mkNode(fmt.Sprintf("n%03d", i), 32, 65536))
		}
		p := newPlacer(t, Config{Seed: 3}, nodes...)
		per := map[string]int{}
		for range 100 {
			per[mustPlace(t, p, req(1, 512)).NodeID()]++
		}
		most := 0
		for _, c := range per {
			most = max(most, c)
		}
		if most > 3 || len(per) < 50 {
			t.Fatalf("100 creates on 100 nodes: %d nodes used, at most %d on one; want ≥ 50 nodes and ≤ 3 on one", len(per), most)
		}
	})
	t.Run("concurrent, 1000 nodes", func(t *testing.T) {
		var nodes []Node
		for i := range 1000 {
			nodes = append(nodes, mkNode(fmt.Sprintf("n%04d", i), 32, 65536))
		}
		p := newPlacer(t, Config{Seed: 4}, nodes...)
		var wg sync.WaitGroup
		for range 1000 {
			wg.Go(func() {
				if _, err := p.Place(req(2, 2048)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		most, used := 0, 0
		for _, s := range p.Status() {
			most = max(most, s.InFlightCreates)
			if s.InFlightCreates > 0 {
				used++
			}
		}
		if most > 4 || used < 500 {
			t.Fatalf("1000 concurrent creates on 1000 nodes: %d nodes used, at most %d on one; want ≥ 500 and ≤ 4", used, most)
		}
	})
	t.Run("one empty node among busy ones", func(t *testing.T) {
		nodes := []Node{mkNode("empty", 32, 65536)}
		for i := range 9 {
			nodes = append(nodes, mkNode(fmt.Sprintf("busy%d", i), 32, 65536, withReserved(8, 16384)))
		}
		p := newPlacer(t, Config{K: 10}, nodes...)
		per := map[string]int{}
		for range 10 {
			per[mustPlace(t, p, req(4, 4096)).NodeID()]++
		}
		if per["empty"] == 0 || per["empty"] > 3 {
			t.Fatalf("burst of 10 with one empty node: %v; want the empty node to take 1 to 3, not the whole burst", per)
		}
	})
}

func TestLabelsHonoured(t *testing.T) {
	p := newPlacer(t, Config{},
		mkNode("plain1", 16, 32768),
		mkNode("plain2", 16, 32768),
		mkNode("kvm1", 32, 65536, withLabels("kvm"), withReserved(8, 16384)),
		mkNode("kvm2", 32, 65536, withLabels("kvm", "gpu")),
	)
	r := req(2, 2048)
	r.Labels = []string{"kvm"}
	for range 10 {
		if id := mustPlace(t, p, r).NodeID(); !strings.HasPrefix(id, "kvm") {
			t.Fatalf("request with label kvm placed on %s", id)
		}
	}
	r.Labels = []string{"kvm", "gpu"}
	for range 3 {
		if id := mustPlace(t, p, r).NodeID(); id != "kvm2" {
			t.Fatalf("request with labels kvm,gpu placed on %s, want kvm2", id)
		}
	}
	r.Labels = []string{"tpu"}
	_, err := p.Place(r)
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("label nobody has: got %v, want a *RefusedError", err)
	}
	if !slices.Equal(re.Short(), []string{"label"}) || re.MissingLabel["tpu"] != 4 {
		t.Fatalf("short %v, missing %v; want [label] and tpu missing on 4", re.Short(), re.MissingLabel)
	}
	if msg := err.Error(); !strings.Contains(msg, "4 lack a required label: tpu (4)") {
		t.Fatalf("message %q does not name the missing label", msg)
	}

	rt := req(1, 512)
	rt.Runtime = "microvm"
	if _, err := p.Place(rt); !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "4 run another runtime than microvm") {
		t.Fatalf("runtime nobody runs: %v", err)
	}
}

func TestDrainingAndLostNeverChosen(t *testing.T) {
	p := newPlacer(t, Config{},
		mkNode("draining", 64, 131072, withState(Draining)),
		mkNode("lost", 64, 131072, withState(Lost)),
		mkNode("live", 64, 131072, withReserved(32, 65536)),
	)
	for range 30 {
		if id := mustPlace(t, p, req(1, 1024)).NodeID(); id != "live" {
			t.Fatalf("placed on %s", id)
		}
	}
	if err := p.SetState("live", Draining); err != nil {
		t.Fatal(err)
	}
	_, err := p.Place(req(1, 1024))
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "no live node (2 draining, 1 lost)") {
		t.Fatalf("all nodes draining or lost: got %v", err)
	}
	var re *RefusedError
	if errors.As(err, &re); !slices.Equal(re.Short(), []string{"nodes"}) {
		t.Fatalf("short %v, want [nodes]", re.Short())
	}
	// The lost node heartbeats again: it is live.
	if err := p.Update(mkNode("lost", 64, 131072)); err != nil {
		t.Fatal(err)
	}
	if id := mustPlace(t, p, req(1, 1024)).NodeID(); id != "lost" {
		t.Fatalf("placed on %s, want the node that came back", id)
	}
	if err := p.SetState("nope", Live); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("SetState of an unknown node: %v", err)
	}
}

func TestPrefersTemplateAndWarmPool(t *testing.T) {
	var nodes []Node
	for i := range 50 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%02d", i), 32, 65536, withReserved(8, 16384), withTemplates("base")))
	}
	nodes[17].Templates = []string{"base", "python"}
	nodes[33].Templates = []string{"base", "python"}
	nodes[33].Reserved = Resources{CPUCount: 10, MemoryMB: 20480} // busier, but a warm sandbox is ready
	nodes[33].WarmPool = map[string]int{"python": 1}
	p := newPlacer(t, Config{}, nodes...)

	r := req(1, 1024)
	r.Template = "python"
	first := mustPlace(t, p, r)
	if first.NodeID() != "n33" || !first.Warm() {
		t.Fatalf("first python create on %s (warm %v), want n33 with its warm sandbox", first.NodeID(), first.Warm())
	}
	second := mustPlace(t, p, r) // n33's one warm sandbox is taken in flight
	if second.NodeID() != "n17" || second.Warm() {
		t.Fatalf("second python create on %s (warm %v), want n17, the other holder, without a warm sandbox", second.NodeID(), second.Warm())
	}
	first.Confirm(0)
	if s, _ := p.NodeStatus("n33"); s.WarmPool["python"] != 0 {
		t.Fatalf("n33 still offers %d warm python sandboxes after a claim", s.WarmPool["python"])
	}
	second.Release()

	// The preference does not outweigh a large load difference.
	busy := mkNode("n17", 32, 65536, withReserved(30, 60000), withTemplates("base", "python"))
	if err := p.Update(busy); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if id := mustPlace(t, p, r).NodeID(); id == "n17" {
			t.Fatal("placed on n17 at 94% load for its template over nodes at 25%")
		}
	}

	// A node that pulled the template on a confirmed create holds it.
	r.Template = "node20"
	res := mustPlace(t, p, r)
	res.Confirm(0)
	if s, _ := p.NodeStatus(res.NodeID()); !slices.Contains(s.Templates, "node20") {
		t.Fatalf("node %s does not hold node20 after a create of it: %v", res.NodeID(), s.Templates)
	}
	if id := mustPlace(t, p, r).NodeID(); id != res.NodeID() {
		t.Fatalf("second node20 create on %s, want %s which holds it now", id, res.NodeID())
	}
}

func TestRefusalError(t *testing.T) {
	disk := func(n *Node) { n.Capacity.DiskMB = 10240; n.Reserved.DiskMB = 8192 }
	cases := []struct {
		name  string
		nodes []Node
		req   Request
		short []string
		want  []string
	}{{
		name:  "memory",
		nodes: []Node{mkNode("a", 16, 8192, withReserved(2, 6144)), mkNode("b", 16, 8192, withReserved(2, 7168))},
		req:   req(2, 4096),
		short: []string{"memory"},
		want:  []string{"(2 CPUs, 4096 MiB memory, template base)", "of 2 live nodes, memory is short on 2 (most free: 2048 MiB)"},
	}, {
		name:  "cpu and memory",
		nodes: []Node{mkNode("a", 4, 8192, withReserved(3, 0)), mkNode("b", 16, 8192, withReserved(0, 8000))},
		req:   req(2, 1024),
		short: []string{"memory", "cpu"},
		want:  []string{"memory is short on 1 (most free: 8192 MiB)", "CPU is short on 1 (most free: 16)"},
	}, {
		name:  "disk",
		nodes: []Node{mkNode("a", 4, 8192, disk)},
		req:   Request{Resources: Resources{CPUCount: 1, MemoryMB: 512, DiskMB: 4096}},
		short: []string{"disk"},
		want:  []string{"disk is short on 1 (most free: 2048 MiB)"},
	}, {
		name:  "sandbox count",
		nodes: []Node{mkNode("a", 4, 8192, func(n *Node) { n.MaxSandboxes, n.Sandboxes = 2, 2 })},
		req:   req(1, 512),
		short: []string{"sandboxes"},
		want:  []string{"1 are at their sandbox limit"},
	}, {
		name:  "label, with others draining",
		nodes: []Node{mkNode("a", 4, 8192), mkNode("b", 4, 8192, withLabels("kvm"), withState(Draining))},
		req:   Request{Resources: Resources{CPUCount: 1, MemoryMB: 512}, Labels: []string{"kvm"}},
		short: []string{"label"},
		want:  []string{"labels kvm)", "of 1 live nodes, 1 lack a required label: kvm (1); none matches (and 1 draining, 0 lost)"},
	}, {
		name: "mixed, as in ARCHITECTURE.md",
		nodes: func() []Node {
			var ns []Node
			for i := range 4 {
				ns = append(ns, mkNode(fmt.Sprintf("plain%d", i), 16, 16384))
			}
			for i := range 8 {
				ns = append(ns, mkNode(fmt.Sprintf("kvm%d", i), 16, 16384, withLabels("kvm"), withReserved(4, 14336)))
			}
			return append(ns, mkNode("d", 16, 16384, withLabels("kvm"), withState(Draining)))
		}(),
		req:   Request{Template: "base", Resources: Resources{CPUCount: 2, MemoryMB: 4096}, Labels: []string{"kvm"}},
		short: []string{"memory"},
		want: []string{"no node can take the sandbox (2 CPUs, 4096 MiB memory, labels kvm, template base): of 12 live nodes, " +
			"4 lack a required label: kvm (4); memory is short on 8 (most free: 2048 MiB) (and 1 draining, 0 lost)"},
	}, {
		name:  "template required",
		nodes: []Node{mkNode("a", 4, 8192), mkNode("b", 4, 8192, withTemplates("other"))},
		req:   Request{Template: "base", TemplateRequired: true, Resources: Resources{CPUCount: 1, MemoryMB: 512}},
		short: []string{"template"},
		want:  []string{"template base (required))", "of 2 live nodes, 2 do not hold the template base; none matches"},
	}, {
		name:  "excluded",
		nodes: []Node{mkNode("a", 4, 8192), mkNode("b", 4, 8192, withState(Lost))},
		req:   Request{Resources: Resources{CPUCount: 1, MemoryMB: 512}, Exclude: []string{"a"}},
		short: []string{"nodes"},
		want:  []string{"no live node (0 draining, 1 lost, 1 excluded)"},
	}, {
		name:  "no nodes",
		req:   req(1, 512),
		short: []string{"nodes"},
		want:  []string{"no nodes are registered"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlacer(t, Config{}, tc.nodes...)
			_, err := p.Place(tc.req)
			if !errors.Is(err, ErrNoCapacity) {
				t.Fatalf("got %v, want ErrNoCapacity", err)
			}
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("got %T, want *RefusedError", err)
			}
			if !slices.Equal(re.Short(), tc.short) {
				t.Errorf("Short() = %v, want %v", re.Short(), tc.short)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err.Error(), w)
				}
			}
		})
	}
}

func TestConfirmReleaseBookkeeping(t *testing.T) {
	n := mkNode("a", 4, 8192, withReserved(0, 0))
	p := newPlacer(t, Config{}, n)
	status := func() NodeStatus { s, _ := p.NodeStatus("a"); return s }

	r := mustPlace(t, p, req(2, 2048))
	if s := status(); s.InFlight != (Resources{CPUCount: 2, MemoryMB: 2048}) || s.InFlightCreates != 1 {
		t.Fatalf("after Place: in flight %+v (%d)", s.InFlight, s.InFlightCreates)
	}
	r.Release()
	r.Release()
	r.Confirm(0) // ended already: no effect
	if s := status(); s.Committed() != (Resources{}) || s.InFlightCreates != 0 || s.ConfirmedCreates != 0 {
		t.Fatalf("after Release: %+v", s)
	}

	r = mustPlace(t, p, req(2, 2048))
	r.Confirm(0)
	r.Confirm(0)
	if s := status(); s.InFlightCreates != 0 || s.Confirmed != (Resources{CPUCount: 2, MemoryMB: 2048}) || s.ConfirmedCreates != 1 {
		t.Fatalf("after Confirm: %+v", s)
	}
	mustPlace(t, p, req(2, 2048)) // in flight: the node is full
	if _, err := p.Place(req(1, 512)); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("full node (2 confirmed + 2 in flight of 4 CPUs): %v", err)
	}
	// The next heartbeat reports the confirmed sandbox itself: the confirmed
	// share is dropped, the in-flight one stays.
	n.Reserved, n.Sandboxes, n.Gen = Resources{CPUCount: 2, MemoryMB: 2048}, 1, n.Gen+1
	if err := p.Update(n); err != nil {
		t.Fatal(err)
	}
	if s := status(); s.Confirmed != (Resources{}) || s.InFlightCreates != 1 || s.Committed() != (Resources{CPUCount: 4, MemoryMB: 4096}) {
		t.Fatalf("after the heartbeat: %+v", s)
	}
	// The sandbox ended: the heartbeat frees its share.
	n.Reserved, n.Sandboxes, n.Gen = Resources{}, 0, n.Gen+1
	if err := p.Update(n); err != nil {
		t.Fatal(err)
	}
	mustPlace(t, p, req(2, 2048))
}

func TestMaxSandboxes(t *testing.T) {
	p := newPlacer(t, Config{}, mkNode("a", 64, 65536, func(n *Node) { n.MaxSandboxes, n.Sandboxes = 3, 1 }))
	mustPlace(t, p, req(1, 128)).Confirm(0)
	mustPlace(t, p, req(1, 128))
	if _, err := p.Place(req(1, 128)); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("1 running + 1 confirmed + 1 in flight of 3: %v", err)
	}
}

func TestRemoveWithReservationsInFlight(t *testing.T) {
	p := newPlacer(t, Config{}, mkNode("a", 4, 4096, withTemplates("base"), withWarm("base", 1)))
	r1, r2 := mustPlace(t, p, req(2, 2048)), mustPlace(t, p, req(2, 2048))
	p.Remove("a")
	r1.Confirm(0)
	r2.Release()
	if len(p.Status()) != 0 {
		t.Fatalf("status after Remove: %+v", p.Status())
	}
	if err := p.Update(mkNode("a", 4, 4096)); err != nil {
		t.Fatal(err)
	}
	if s, _ := p.NodeStatus("a"); s.Committed() != (Resources{}) || s.InFlightCreates != 0 {
		t.Fatalf("a node added again starts clean: %+v", s)
	}
	mustPlace(t, p, req(4, 4096))
}

func TestInvalid(t *testing.T) {
	p := newPlacer(t, Config{}, mkNode("a", 4, 4096))
	for _, r := range []Request{req(0, 512), req(1, 0), {Resources: Resources{CPUCount: 1, MemoryMB: 1, DiskMB: -1}}} {
		if _, err := p.Place(r); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Place(%+v): %v, want ErrInvalidRequest", r, err)
		}
	}
	for _, n := range []Node{{}, mkNode("b", -1, 1), mkNode("c", 1, 1, withState(State(9)))} {
		if err := p.Update(n); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("Update(%+v): %v, want ErrInvalidNode", n, err)
		}
	}
}

// The same seed, nodes and calls give the same placements.
func TestDeterministic(t *testing.T) {
	run := func() []string {
		var nodes []Node
		for i := range 200 {
			nodes = append(nodes, mkNode(fmt.Sprintf("n%03d", i), 16+i%3*16, 65536, withReserved(i%7, int64(i%5)*1024)))
		}
		p := newPlacer(t, Config{Seed: 42}, nodes...)
		var got []string
		for i := range 300 {
			r := mustPlace(t, p, req(1+i%4, 1024))
			got = append(got, r.NodeID())
			if i%3 == 0 {
				r.Confirm(0)
			}
		}
		return got
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Fatal("two runs with seed 42 placed differently")
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Live: "live", Draining: "draining", Lost: "lost", State(7): "state(7)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", int(s), s.String(), want)
		}
	}
}

// A heartbeat sampled before a create ended but delivered after its Confirm
// does not free the create's resources (found in review: the node was
// filled twice).
func TestStaleHeartbeatKeepsConfirmed(t *testing.T) {
	// Without a generation from the node: counted until a heartbeat newer
	// than the one the placer had at Confirm time.
	n := mkNode("a", 4, 8192)
	p := newPlacer(t, Config{}, n)
	stale := n
	mustPlace(t, p, req(4, 4096)).Confirm(0)
	if err := p.Update(stale); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Place(req(4, 4096)); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("after a stale heartbeat: Place = %v, want ErrNoCapacity (4 of 4 CPUs confirmed)", err)
	}
	checkNoOverCommit(t, p)
	n.Gen, n.Reserved = 2, Resources{CPUCount: 4, MemoryMB: 4096}
	if err := p.Update(n); err != nil {
		t.Fatal(err)
	}
	if s, _ := p.NodeStatus("a"); s.ConfirmedCreates != 0 || s.Committed() != n.Reserved {
		t.Fatalf("after the heartbeat that counts it: %+v", s)
	}

	// With the node's generation: the create was admitted when the node's
	// next heartbeat was generation 5; heartbeats 3 and 4, delivered after
	// the Confirm, do not count it, and 5 does.
	n = mkNode("b", 4, 8192, func(n *Node) { n.Gen = 2 })
	p = newPlacer(t, Config{}, n)
	mustPlace(t, p, req(3, 3072)).Confirm(5)
	for _, g := range []uint64{3, 4} {
		n.Gen = g
		if err := p.Update(n); err != nil {
			t.Fatal(err)
		}
		if s, _ := p.NodeStatus("b"); s.Confirmed.CPUCount != 3 {
			t.Fatalf("after heartbeat %d: confirmed %+v, want the create still counted", g, s.Confirmed)
		}
	}
	// Out of order: a heartbeat older than one received is ignored.
	n.Gen, n.Reserved = 5, Resources{CPUCount: 3, MemoryMB: 3072}
	if err := p.Update(n); err != nil {
		t.Fatal(err)
	}
	old := n
	old.Gen, old.Reserved = 4, Resources{}
	if err := p.Update(old); err != nil {
		t.Fatal(err)
	}
	if s, _ := p.NodeStatus("b"); s.Gen != 5 || s.Committed().CPUCount != 3 {
		t.Fatalf("after an out-of-order heartbeat: %+v, want generation 5 with 3 CPUs", s)
	}
	// A Confirm whose generation a received heartbeat already counts adds
	// nothing.
	r := mustPlace(t, p, req(1, 1024))
	n.Gen, n.Reserved = 6, Resources{CPUCount: 4, MemoryMB: 4096}
	if err := p.Update(n); err != nil {
		t.Fatal(err)
	}
	r.Confirm(6)
	if s, _ := p.NodeStatus("b"); s.ConfirmedCreates != 0 || s.Committed().CPUCount != 4 {
		t.Fatalf("a Confirm already counted by a heartbeat: %+v", s)
	}
}

// Nodes whose heartbeats are sampled before creates end and delivered after
// their Confirm, some out of order, while creates and ends race them: no
// node ever runs more than its capacity.
func TestDelayedHeartbeatsNeverOverCommit(t *testing.T) {
	type simNode struct {
		mu       sync.Mutex
		node     Node // the last heartbeat sampled
		reserved Resources
		running  []Resources
	}
	var sims []*simNode
	var nodes []Node
	for i := range 4 {
		n := mkNode(fmt.Sprintf("n%d", i), 8, 16384)
		sims = append(sims, &simNode{node: n})
		nodes = append(nodes, n)
	}
	p := newPlacer(t, Config{}, nodes...)
	byID := map[string]*simNode{}
	for _, s := range sims {
		byID[s.node.ID] = s
	}
	sample := func(s *simNode) Node {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.node.Gen++
		s.node.Reserved = s.reserved
		return s.node
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var overMu sync.Mutex
	var over []string
	// Two heartbeaters per node, each delivering its sample after a pause,
	// so heartbeats arrive late and out of order.
	for _, s := range sims {
		for j := range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(j), 1))
				for {
					select {
					case <-stop:
						return
					default:
					}
					hb := sample(s)
					for range rng.IntN(200) {
						runtime.Gosched()
					}
					if err := p.Update(hb); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	var creates, refused atomic.Int64
	deadline := time.Now().Add(10 * time.Second)
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for creates.Load() < 4000 && time.Now().Before(deadline) {
				r, err := p.Place(req(1+rng.IntN(3), 1024))
				if err != nil {
					// Full: a sandbox somewhere ends (the node's
					// next heartbeat says so).
					refused.Add(1)
					s := sims[rng.IntN(len(sims))]
					s.mu.Lock()
					if len(s.running) > 0 {
						k := rng.IntN(len(s.running))
						s.reserved = s.reserved.Sub(s.running[k])
						s.running = slices.Delete(s.running, k, k+1)
					}
					s.mu.Unlock()
					runtime.Gosched()
					continue
				}
				s := byID[r.NodeID()]
				s.mu.Lock()
				s.reserved = s.reserved.Add(r.req.Resources)
				if s.reserved.CPUCount > s.node.Capacity.CPUCount {
					overMu.Lock()
					over = append(over, fmt.Sprintf("%s runs %d of %d CPUs", s.node.ID, s.reserved.CPUCount, s.node.Capacity.CPUCount))
					overMu.Unlock()
				}
				s.running = append(s.running, r.req.Resources)
				gen := s.node.Gen + 1 // the first heartbeat that counts it
				s.mu.Unlock()
				for range rng.IntN(50) {
					runtime.Gosched()
				}
				r.Confirm(gen)
				creates.Add(1)
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if len(over) > 0 {
		t.Fatalf("%d creates ran a node past its capacity, first: %s", len(over), over[0])
	}
	if creates.Load() < 4000 {
		t.Fatalf("only %d creates placed (%d refused): the test did not exercise much", creates.Load(), refused.Load())
	}
}

// A drain (or loss) set by the api side holds until SetState(Live), whatever
// the node's heartbeats say; a heartbeat's own Draining counts too (found in
// review: the next heartbeat undid a drain).
func TestSetStateSticky(t *testing.T) {
	n := mkNode("a", 8, 8192)
	p := newPlacer(t, Config{}, n)
	heartbeat := func(s State) {
		t.Helper()
		n.Gen++
		n.State = s
		if err := p.Update(n); err != nil {
			t.Fatal(err)
		}
	}
	state := func() State { s, _ := p.NodeStatus("a"); return s.State }
	for _, pin := range []State{Draining, Lost} {
		if err := p.SetState("a", pin); err != nil {
			t.Fatal(err)
		}
		heartbeat(Live)
		if got := state(); got != pin {
			t.Fatalf("SetState(%s) then a live heartbeat: state %s", pin, got)
		}
		if _, err := p.Place(req(1, 512)); !errors.Is(err, ErrNoCapacity) {
			t.Fatalf("placed on a node set %s: %v", pin, err)
		}
		if err := p.SetState("a", Live); err != nil {
			t.Fatal(err)
		}
		if got := state(); got != Live {
			t.Fatalf("SetState(live) after %s: state %s", pin, got)
		}
		mustPlace(t, p, req(1, 512)).Release()
	}
	// The node's own drain: its heartbeat says so; SetState(Live) does not
	// override the node, its next live heartbeat does.
	heartbeat(Draining)
	if err := p.SetState("a", Live); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != Draining {
		t.Fatalf("a node draining by its own heartbeat after SetState(live): state %s", got)
	}
	heartbeat(Live)
	if got := state(); got != Live {
		t.Fatalf("after the node's live heartbeat: state %s", got)
	}
	mustPlace(t, p, req(1, 512))
}

// A required template is placed only on the nodes holding it (or that a
// confirmed create there pulled), however loaded the others are not.
func TestTemplateRequired(t *testing.T) {
	p := newPlacer(t, Config{}, mkNode("a", 16, 16384), mkNode("b", 16, 16384, withTemplates("py"), withReserved(12, 0)), mkNode("c", 16, 16384))
	r := Request{Template: "py", TemplateRequired: true, Resources: Resources{CPUCount: 1, MemoryMB: 512}}
	for range 4 {
		res := mustPlace(t, p, r)
		if res.NodeID() != "b" {
			t.Fatalf("placed on %s, want b (the only holder)", res.NodeID())
		}
		res.Confirm(0)
	}
	if _, err := p.Place(r); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("b is full: got %v, want ErrNoCapacity", err)
	}
	r.TemplateRequired = false
	if res := mustPlace(t, p, r); res.NodeID() == "b" {
		t.Fatalf("not required: placed on the full node b")
	}
}

// Excluded nodes are never chosen.
func TestExclude(t *testing.T) {
	p := newPlacer(t, Config{}, mkNode("a", 16, 16384), mkNode("b", 16, 16384), mkNode("c", 16, 16384))
	for range 50 {
		res := mustPlace(t, p, Request{Resources: Resources{CPUCount: 1, MemoryMB: 64}, Exclude: []string{"a", "c"}})
		if res.NodeID() != "b" {
			t.Fatalf("placed on %s, want b", res.NodeID())
		}
		res.Release()
	}
}

// Command cluster runs Airlock's placement (internal/cluster/placement) against
// simulated nodes and compares it with two naive policies in the same run:
// a random node, and a full scan for the least-loaded node. No daemon, no
// network: the nodes are structs that run, end and report sandboxes.
//
//	go run ./bench/cluster                      # 1,000 nodes, 100,000 sandboxes, bursts of 1,000 (about 30 s on 2 cores)
//	go run ./bench/cluster -nodes 5000 -sandboxes 500000 -policies bestofk
//
// Each policy gets the same workload (same seed): bursts of concurrent
// creates of a mix of sizes, some needing the kvm label, over 40 templates
// of skewed popularity, with sandboxes ending between bursts. Three phases:
// fill (until -sandboxes run), steady (-steady bursts where as many end as
// start; 10 nodes drain and 5 are lost at its start) and pressure (no more
// ending, until half of a burst is refused). See bench/cluster/README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
)

type config struct {
	nodes, sandboxes, burst int
	endPerBurst             float64 // fill phase: fraction of a burst that ends between bursts
	steady                  int
	failRate                float64
	hbDelay                 float64
	kvmShare                float64
	k                       int
	warmBonus, missCost     float64
	seed                    uint64
	policies                []string
}

func main() {
	var c config
	var policies string
	flag.IntVar(&c.nodes, "nodes", 1000, "simulated nodes")
	flag.IntVar(&c.sandboxes, "sandboxes", 100000, "running sandboxes to reach before the steady phase")
	flag.IntVar(&c.burst, "burst", 1000, "concurrent creates per burst")
	flag.Float64Var(&c.endPerBurst, "churn", 0.3, "fill phase: sandboxes ending between bursts, as a fraction of a burst")
	flag.IntVar(&c.steady, "steady", 20, "bursts in the steady phase (as many sandboxes end as start)")
	flag.Float64Var(&c.failRate, "fail", 0.01, "fraction of placed creates that fail on the node (reservation released)")
	flag.Float64Var(&c.hbDelay, "hb-delay", 0.2, "fraction of nodes whose heartbeat after a burst was sampled before the burst's creates ended (delivered after their confirms)")
	flag.Float64Var(&c.kvmShare, "kvm-requests", 0.1, "fraction of creates that need the kvm label")
	flag.IntVar(&c.k, "k", 3, "best-of-K sample size")
	flag.Float64Var(&c.warmBonus, "warm-bonus", 0, "bestofk: score bonus of a node with a warm sandbox (0: the placer's default)")
	flag.Float64Var(&c.missCost, "miss-cost", 0, "bestofk: score cost of a node without the template (0: the placer's default)")
	flag.Uint64Var(&c.seed, "seed", 1, "workload seed (same for every policy)")
	flag.StringVar(&policies, "policies", "bestofk,random,leastloaded", "policies to run, comma-separated")
	flag.Parse()
	c.policies = strings.Split(policies, ",")

	fmt.Printf("cluster bench: %d nodes, %d sandboxes, bursts of %d, churn %.2f/burst while filling, %d steady bursts, %.0f%% of creates fail, %.0f%% need kvm, %.0f%% of heartbeats late, K=%d, GOMAXPROCS=%d\n",
		c.nodes, c.sandboxes, c.burst, c.endPerBurst, c.steady, 100*c.failRate, 100*c.kvmShare, 100*c.hbDelay, c.k, runtime.GOMAXPROCS(0))
	var results []result
	for _, name := range c.policies {
		pol, err := newPolicy(name, c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		start := time.Now()
		r := run(c, pol)
		r.elapsed = time.Since(start)
		fmt.Printf("  %s: %d creates in %d bursts, %d sandboxes running after the fill, %.1fs\n", name, r.creates, r.bursts, r.runningAfterFill, r.elapsed.Seconds())
		results = append(results, r)
	}
	printTable(results)
}

// ---------------------------------------------------------------- workload

type size struct {
	share float64
	res   placement.Resources
}

// The mix of sandbox sizes: mostly E2B's default (2 vCPU, 512 MiB), a tail
// of larger ones.
var sizes = []size{
	{0.40, placement.Resources{CPUCount: 2, MemoryMB: 512}},
	{0.25, placement.Resources{CPUCount: 1, MemoryMB: 1024}},
	{0.20, placement.Resources{CPUCount: 2, MemoryMB: 2048}},
	{0.10, placement.Resources{CPUCount: 4, MemoryMB: 4096}},
	{0.04, placement.Resources{CPUCount: 8, MemoryMB: 8192}},
	{0.01, placement.Resources{CPUCount: 16, MemoryMB: 32768}},
}

const templates = 40

func templateName(i int) string { return fmt.Sprintf("tpl%02d", i) }

// workload draws the creates and the ends, the same for every policy.
type workload struct {
	rng  *rand.Rand
	zipf *rand.Zipf
	kvm  float64
}

func newWorkload(c config) *workload {
	rng := rand.New(rand.NewPCG(c.seed, 1))
	return &workload{rng: rng, zipf: rand.NewZipf(rng, 1.2, 2, templates-1), kvm: c.kvmShare}
}

func (w *workload) request() placement.Request {
	x, res := w.rng.Float64(), sizes[len(sizes)-1].res
	for _, s := range sizes {
		if x < s.share {
			res = s.res
			break
		}
		x -= s.share
	}
	r := placement.Request{Template: templateName(int(w.zipf.Uint64())), Resources: res}
	if w.rng.Float64() < w.kvm {
		r.Labels = []string{"kvm"}
	}
	return r
}

// ---------------------------------------------------------------- simulated cluster

type simNode struct {
	stated placement.Node // what its heartbeat says (capacity, labels, state; Gen is the last heartbeat's)
	used   placement.Resources
	count  int
	tpls   map[string]bool
	warm   map[string]int
	// Creates that landed here in the current burst.
	burst int
}

func (n *simNode) load() float64 {
	return max(float64(n.used.CPUCount)/float64(n.stated.Capacity.CPUCount), float64(n.used.MemoryMB)/float64(n.stated.Capacity.MemoryMB))
}

// heartbeat samples the node's next heartbeat.
func (n *simNode) heartbeat() placement.Node {
	n.stated.Gen++
	s := n.stated
	s.Reserved, s.Sandboxes = n.used, n.count
	s.Templates = s.Templates[:0:0]
	for t := range n.tpls {
		s.Templates = append(s.Templates, t)
	}
	slices.Sort(s.Templates)
	s.WarmPool = map[string]int{}
	for t, c := range n.warm {
		s.WarmPool[t] = c
	}
	return s
}

type sandbox struct {
	node int
	res  placement.Resources
}

// newNodes builds the cluster: 70% nodes of 64 cores and 256 GiB, 30% of
// 128 cores and 512 GiB; each states 4 vCPUs per core (CPU over-commit is
// the node's own policy) and its memory as is. 60% have the kvm label.
// Templates 0-2 are on every node, 3-9 on half, the rest on 5%; nodes
// with a warm pool (20%) keep 2 ready sandboxes of templates 0 and 1.
func newNodes(c config) []*simNode {
	rng := rand.New(rand.NewPCG(c.seed, 2))
	nodes := make([]*simNode, c.nodes)
	for i := range nodes {
		cores, mem := 64, int64(256*1024)
		if rng.Float64() < 0.3 {
			cores, mem = 128, 512*1024
		}
		n := &simNode{
			stated: placement.Node{
				ID: nodeID(i), Runtime: "gvisor",
				Capacity: placement.Resources{CPUCount: 4 * cores, MemoryMB: mem},
			},
			tpls: map[string]bool{}, warm: map[string]int{},
		}
		if rng.Float64() < 0.6 {
			n.stated.Labels = []string{"kvm"}
		}
		for t := range templates {
			if t < 3 || (t < 10 && rng.Float64() < 0.5) || rng.Float64() < 0.05 {
				n.tpls[templateName(t)] = true
			}
		}
		if rng.Float64() < 0.2 {
			n.warm[templateName(0)], n.warm[templateName(1)] = 2, 2
		}
		nodes[i] = n
	}
	return nodes
}

func nodeID(i int) string { return fmt.Sprintf("node-%04d", i) }

// ---------------------------------------------------------------- policies

// ticket is a placed create: its node and, for the real placer, its
// reservation.
type ticket struct {
	node int
	res  placement.Resources
	rsv  *placement.Reservation
}

type policy interface {
	name() string
	place(placement.Request) (ticket, error)
	confirm(t ticket, gen uint64) // gen: the node's create response's (placement.Node.Gen)
	release(ticket)
	heartbeat(i int, n placement.Node)
}

func newPolicy(name string, c config) (policy, error) {
	switch name {
	case "bestofk":
		return &bestOfK{p: placement.New(placement.Config{K: c.k, Seed: c.seed, WarmBonus: c.warmBonus, TemplateMissCost: c.missCost})}, nil
	case "random":
		return &naive{random: true, rng: rand.New(rand.NewPCG(c.seed, 3))}, nil
	case "leastloaded":
		return &naive{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (bestofk, random, leastloaded)", name)
}

type bestOfK struct{ p *placement.Placer }

func (b *bestOfK) name() string { return "bestofk" }
func (b *bestOfK) place(r placement.Request) (ticket, error) {
	rsv, err := b.p.Place(r)
	if err != nil {
		return ticket{}, err
	}
	return ticket{node: -1, res: r.Resources, rsv: rsv}, nil // node: resolved by the caller, outside the timing
}
func (b *bestOfK) confirm(t ticket, gen uint64) { t.rsv.Confirm(gen) }
func (b *bestOfK) release(t ticket)             { t.rsv.Release() }
func (b *bestOfK) heartbeat(_ int, n placement.Node) {
	if err := b.p.Update(n); err != nil {
		panic(err)
	}
}

// naive is the baselines, with the same bookkeeping as the placer (a
// heartbeat's reservations, plus creates in flight and those confirmed that
// no heartbeat counts yet, by generation):
// random picks one random live node with the labels and refuses when it
// lacks room; leastloaded scans every node for the lowest load after the
// create.
type naive struct {
	random bool
	mu     sync.Mutex // guards everything below
	rng    *rand.Rand
	nodes  []naiveNode
}

type naiveNode struct {
	placement.Node
	extra placement.Resources // in flight, and confirmed but not counted by a heartbeat
	confd []naiveConfirm      // confirmed, not counted by a heartbeat
}

type naiveConfirm struct {
	gen uint64
	res placement.Resources
}

func (n *naive) name() string {
	if n.random {
		return "random"
	}
	return "leastloaded"
}

var errFull = errors.New("no room")

func (nn *naiveNode) eligible(r placement.Request) bool {
	if nn.State != placement.Live {
		return false
	}
	for _, l := range r.Labels {
		if !slices.Contains(nn.Labels, l) {
			return false
		}
	}
	return true
}

func (nn *naiveNode) loadAfter(r placement.Request) (float64, bool) {
	a := nn.Reserved.Add(nn.extra).Add(r.Resources)
	if a.CPUCount > nn.Capacity.CPUCount || a.MemoryMB > nn.Capacity.MemoryMB {
		return 0, false
	}
	return max(float64(a.CPUCount)/float64(nn.Capacity.CPUCount), float64(a.MemoryMB)/float64(nn.Capacity.MemoryMB)), true
}

func (n *naive) place(r placement.Request) (ticket, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	best := -1
	if n.random {
		for range 100 {
			i := n.rng.IntN(len(n.nodes))
			if n.nodes[i].eligible(r) {
				if _, ok := n.nodes[i].loadAfter(r); ok {
					best = i
				}
				break
			}
		}
	} else {
		bestLoad := math.Inf(1)
		for i := range n.nodes {
			if !n.nodes[i].eligible(r) {
				continue
			}
			if l, ok := n.nodes[i].loadAfter(r); ok && l < bestLoad {
				best, bestLoad = i, l
			}
		}
	}
	if best < 0 {
		return ticket{}, errFull
	}
	n.nodes[best].extra = n.nodes[best].extra.Add(r.Resources)
	return ticket{node: best, res: r.Resources}, nil
}

func (n *naive) confirm(t ticket, gen uint64) {
	n.mu.Lock()
	nn := &n.nodes[t.node]
	if gen > nn.Gen {
		nn.confd = append(nn.confd, naiveConfirm{gen, t.res})
	} else { // a heartbeat received counts it already
		nn.extra = nn.extra.Sub(t.res)
	}
	n.mu.Unlock()
}

func (n *naive) release(t ticket) {
	n.mu.Lock()
	n.nodes[t.node].extra = n.nodes[t.node].extra.Sub(t.res)
	n.mu.Unlock()
}

func (n *naive) heartbeat(i int, node placement.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for len(n.nodes) <= i {
		n.nodes = append(n.nodes, naiveNode{})
	}
	nn := &n.nodes[i]
	if node.Gen < nn.Gen { // delivered out of order
		return
	}
	nn.Node = node
	kept := nn.confd[:0]
	for _, c := range nn.confd {
		if c.gen > node.Gen {
			kept = append(kept, c)
		} else {
			nn.extra = nn.extra.Sub(c.res) // in node.Reserved now
		}
	}
	nn.confd = kept
}

// ---------------------------------------------------------------- run

type result struct {
	policy           string
	bursts, creates  int
	phases           [3]phaseStats // fill, steady, pressure
	placedOnNonLive  int
	overCommits      int
	warmHits, pulls  int
	utilFirstRefusal float64
	utilEnd          float64
	lat              []time.Duration
	burstWall        []time.Duration
	imbalance        []float64 // max/mean node load, once per steady burst
	maxPerBurst      int       // most creates one node got in one burst
	runningAfterFill int
	elapsed          time.Duration
}

// capacityLeft tracks, outside the policy, what each live node has
// uncommitted (creates in flight count), and the sums for all nodes and
// for the kvm ones. A refusal while one node could take the request is a
// miss of the policy; while only the sum could, fragmentation.
type capacityLeft struct {
	mu       sync.Mutex             // guards everything below
	free     [2]placement.Resources // [0] all live nodes, [1] live kvm nodes
	node     []placement.Resources
	nodeKVM  []bool
	nodeLive []bool
}

func (c *capacityLeft) add(node int, r placement.Resources, sign int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := placement.Resources{CPUCount: sign * r.CPUCount, MemoryMB: int64(sign) * r.MemoryMB}
	c.node[node] = c.node[node].Add(d)
	if !c.nodeLive[node] {
		return
	}
	c.free[0] = c.free[0].Add(d)
	if c.nodeKVM[node] {
		c.free[1] = c.free[1].Add(d)
	}
}

func (c *capacityLeft) setLive(node int, live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodeLive[node] == live {
		return
	}
	c.nodeLive[node] = live
	sign := -1
	if live {
		sign = 1
	}
	d := placement.Resources{CPUCount: sign * c.node[node].CPUCount, MemoryMB: int64(sign) * c.node[node].MemoryMB}
	c.free[0] = c.free[0].Add(d)
	if c.nodeKVM[node] {
		c.free[1] = c.free[1].Add(d)
	}
}

// room says whether one live node could take r (a miss), or only the sum
// of what they have left (fragmentation).
func (c *capacityLeft) room(r placement.Request) (node, sum bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.free[0]
	if len(r.Labels) > 0 {
		f = c.free[1]
	}
	if f.CPUCount < r.CPUCount || f.MemoryMB < r.MemoryMB {
		return false, false
	}
	for i, n := range c.node {
		if c.nodeLive[i] && (len(r.Labels) == 0 || c.nodeKVM[i]) && n.CPUCount >= r.CPUCount && n.MemoryMB >= r.MemoryMB {
			return true, true
		}
	}
	return false, true
}

func run(c config, pol policy) result {
	res := result{policy: pol.name()}
	nodes := newNodes(c)
	wl := newWorkload(c)
	churn := rand.New(rand.NewPCG(c.seed, 4))
	fail := rand.New(rand.NewPCG(c.seed, 5))
	late := rand.New(rand.NewPCG(c.seed, 6))
	left := &capacityLeft{node: make([]placement.Resources, len(nodes)), nodeKVM: make([]bool, len(nodes)), nodeLive: make([]bool, len(nodes))}
	for i, n := range nodes {
		left.nodeKVM[i] = slices.Contains(n.stated.Labels, "kvm")
		left.nodeLive[i] = true
		left.add(i, n.stated.Capacity, 1)
		pol.heartbeat(i, n.heartbeat())
	}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.stated.ID] = i
	}
	var running []sandbox
	end := func(k int) {
		for range min(k, len(running)) {
			j := churn.IntN(len(running))
			s := running[j]
			running[j] = running[len(running)-1]
			running = running[:len(running)-1]
			n := nodes[s.node]
			n.used = n.used.Sub(s.res)
			n.count--
			left.add(s.node, s.res, 1)
		}
	}

	type outcome struct {
		req               placement.Request
		t                 ticket
		err               error
		lat               time.Duration
		nodeRoom, sumRoom bool
	}
	phase := &res.phases[0]
	var gate sync.RWMutex
	burst := func(measureImbalance bool) (refused int) {
		reqs := make([]placement.Request, c.burst)
		for i := range reqs {
			reqs[i] = wl.request()
		}
		out := make([]outcome, c.burst)
		var wg sync.WaitGroup
		startGate := make(chan struct{})
		for i := range reqs {
			wg.Go(func() {
				<-startGate
				// gate orders a refusal's room check after every create
				// placed before it is counted in left.
				gate.RLock()
				t0 := time.Now()
				t, err := pol.place(reqs[i])
				o := outcome{req: reqs[i], t: t, err: err, lat: time.Since(t0)}
				if err == nil && t.node < 0 {
					o.t.node = index[t.rsv.NodeID()]
				}
				if err == nil {
					left.add(o.t.node, t.res, -1)
				}
				gate.RUnlock()
				if err != nil {
					gate.Lock()
					o.nodeRoom, o.sumRoom = left.room(reqs[i])
					gate.Unlock()
				}
				out[i] = o
			})
		}
		t0 := time.Now()
		close(startGate)
		wg.Wait()
		res.burstWall = append(res.burstWall, time.Since(t0))
		res.bursts++
		for _, n := range nodes {
			n.burst = 0
		}
		// Late heartbeats: some nodes sample theirs now, before the
		// burst's creates end, and it arrives after their confirms.
		early := map[int]placement.Node{}
		for i, n := range nodes {
			if late.Float64() < c.hbDelay {
				early[i] = n.heartbeat()
			}
		}
		// The creates end, in order: most start, a few fail on the node.
		for _, o := range out {
			res.creates++
			phase.creates++
			res.lat = append(res.lat, o.lat)
			if o.err != nil {
				refused++
				phase.refused++
				if o.nodeRoom {
					phase.nodeRoom++
				}
				if o.sumRoom {
					phase.sumRoom++
				}
				if res.utilFirstRefusal == 0 {
					res.utilFirstRefusal = utilisation(nodes)
				}
				continue
			}
			n := nodes[o.t.node]
			n.burst++
			res.maxPerBurst = max(res.maxPerBurst, n.burst)
			if n.stated.State != placement.Live {
				res.placedOnNonLive++
			}
			if fail.Float64() < c.failRate {
				pol.release(o.t)
				left.add(o.t.node, o.t.res, 1)
				continue
			}
			after := n.used.Add(o.t.res)
			if after.CPUCount > n.stated.Capacity.CPUCount || after.MemoryMB > n.stated.Capacity.MemoryMB {
				res.overCommits++
			}
			n.used, n.count = after, n.count+1
			if n.warm[o.req.Template] > 0 {
				n.warm[o.req.Template]--
				res.warmHits++
			} else if !n.tpls[o.req.Template] {
				n.tpls[o.req.Template] = true
				res.pulls++
			}
			pol.confirm(o.t, n.stated.Gen+1) // the first heartbeat that counts it
			running = append(running, sandbox{node: o.t.node, res: o.t.res})
		}
		// Heartbeats: every node reports; warm pools have refilled. A
		// late node's is the one it sampled before the creates ended (its
		// current state arrives after the next burst).
		for i, n := range nodes {
			if len(n.warm) > 0 {
				n.warm[templateName(0)], n.warm[templateName(1)] = 2, 2
			}
			if hb, ok := early[i]; ok {
				pol.heartbeat(i, hb)
				continue
			}
			pol.heartbeat(i, n.heartbeat())
		}
		if measureImbalance {
			res.imbalance = append(res.imbalance, imbalance(nodes))
		}
		return refused
	}

	// Fill.
	for len(running) < c.sandboxes && res.bursts < 3*c.sandboxes/c.burst+10 {
		burst(false)
		end(int(c.endPerBurst * float64(c.burst)))
	}
	res.runningAfterFill = len(running)
	// Steady, after 10 nodes start draining and 5 are lost (their
	// sandboxes are gone).
	for i := range min(15, len(nodes)) {
		idx := i * len(nodes) / 15
		n := nodes[idx]
		if i < 10 {
			n.stated.State = placement.Draining
		} else {
			n.stated.State = placement.Lost
			kept := running[:0]
			for _, s := range running {
				if s.node == idx {
					n.used, n.count = n.used.Sub(s.res), n.count-1
					left.add(idx, s.res, 1)
					continue
				}
				kept = append(kept, s)
			}
			running = kept
		}
		left.setLive(idx, false)
		pol.heartbeat(idx, n.heartbeat())
	}
	phase = &res.phases[1]
	for range c.steady {
		end(c.burst)
		burst(true)
	}
	// Pressure: nothing ends any more; until half a burst is refused.
	phase = &res.phases[2]
	for res.bursts < 10*c.sandboxes/c.burst+100 {
		if burst(false) > c.burst/2 {
			break
		}
	}
	res.utilEnd = utilisation(nodes)
	return res
}

// phaseStats counts one phase's creates and refusals: refusals while one
// live node had room (the policy missed it), and while only the sum of
// what the nodes had left could take the request (fragmentation).
type phaseStats struct {
	creates, refused, nodeRoom, sumRoom int
}

// utilisation is the CPU share allocated on live nodes.
func utilisation(nodes []*simNode) float64 {
	var used, cap int
	for _, n := range nodes {
		if n.stated.State == placement.Live {
			used += n.used.CPUCount
			cap += n.stated.Capacity.CPUCount
		}
	}
	return float64(used) / float64(cap)
}

// imbalance is max/mean of the live nodes' loads (the larger of their CPU
// and memory shares).
func imbalance(nodes []*simNode) float64 {
	var sum, most float64
	var k int
	for _, n := range nodes {
		if n.stated.State != placement.Live {
			continue
		}
		l := n.load()
		sum += l
		most = max(most, l)
		k++
	}
	if sum == 0 {
		return 0
	}
	return most / (sum / float64(k))
}

// ---------------------------------------------------------------- report

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}

func mean(f []float64) float64 {
	if len(f) == 0 {
		return 0
	}
	var s float64
	for _, x := range f {
		s += x
	}
	return s / float64(len(f))
}

func printTable(rs []result) {
	fmt.Println()
	fmt.Println("speed and balance (place: one Place call during a burst of concurrent creates; burst: the whole burst placed;")
	fmt.Println("imbalance: max/mean node load over the steady bursts; pulls: creates on a node without the template):")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "policy\tcreates\tplace p50\tplace p99\tburst p50\tburst p99\timbalance\tmax/node/burst\twarm hits\tpulls\tover-commits\ton non-live\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%.3f\t%d\t%d\t%d\t%d\t%d\t\n",
			r.policy, r.creates, dur(pct(r.lat, 0.5)), dur(pct(r.lat, 0.99)), dur(pct(r.burstWall, 0.5)), dur(pct(r.burstWall, 0.99)),
			mean(r.imbalance), r.maxPerBurst, r.warmHits, r.pulls, r.overCommits, r.placedOnNonLive)
	}
	w.Flush()
	fmt.Println()
	fmt.Println("refusals per phase (node room: a live node could have taken it; sum room: only the sum of what the nodes had left could):")
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "policy\tfill+steady creates\trefused\tnode room\tsum room\tpressure creates\trefused\tnode room\tsum room\tCPU at 1st refusal\tCPU at end\t")
	for _, r := range rs {
		fs := phaseStats{
			creates: r.phases[0].creates + r.phases[1].creates, refused: r.phases[0].refused + r.phases[1].refused,
			nodeRoom: r.phases[0].nodeRoom + r.phases[1].nodeRoom, sumRoom: r.phases[0].sumRoom + r.phases[1].sumRoom,
		}
		pr := r.phases[2]
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.1f%%\t%.1f%%\t\n", r.policy,
			fs.creates, share(fs.refused, fs.creates), share(fs.nodeRoom, fs.creates), share(fs.sumRoom, fs.creates),
			pr.creates, share(pr.refused, pr.creates), share(pr.nodeRoom, pr.creates), share(pr.sumRoom, pr.creates),
			100*r.utilFirstRefusal, 100*r.utilEnd)
	}
	w.Flush()
	if len(rs) < 2 || rs[0].policy != "bestofk" {
		return
	}
	b := rs[0]
	fmt.Println()
	fmt.Println("ratios, baseline / bestofk:")
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "baseline\tplace p50\tplace p99\tburst p50\timbalance\tmax/node/burst\twarm hits\tpulls\trefused (fill+steady)\tCPU at 1st refusal\t")
	for _, r := range rs[1:] {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.policy,
			ratio(float64(pct(r.lat, 0.5)), float64(pct(b.lat, 0.5))),
			ratio(float64(pct(r.lat, 0.99)), float64(pct(b.lat, 0.99))),
			ratio(float64(pct(r.burstWall, 0.5)), float64(pct(b.burstWall, 0.5))),
			ratio(mean(r.imbalance), mean(b.imbalance)),
			ratio(float64(r.maxPerBurst), float64(b.maxPerBurst)),
			ratio(float64(r.warmHits), float64(b.warmHits)),
			ratio(float64(r.pulls), float64(b.pulls)),
			ratio(float64(r.phases[0].refused+r.phases[1].refused), float64(b.phases[0].refused+b.phases[1].refused)),
			ratio(r.utilFirstRefusal, b.utilFirstRefusal))
	}
	w.Flush()
}

func share(n, of int) string {
	return fmt.Sprintf("%d (%.2f%%)", n, 100*float64(n)/float64(max(1, of)))
}

func ratio(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "="
		}
		return "∞"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func dur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d.Nanoseconds())/1e3)
	default:
		return fmt.Sprintf("%.2fms", float64(d.Nanoseconds())/1e6)
	}
}

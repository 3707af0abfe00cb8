//go:build linux

// Command approval measures the egress approval hold (issue 28 part 3) on
// the real kernel path, without a daemon: a network.Manager with its own
// prefix, one sandbox namespace and an "outside" namespace with two
// servers. It prints, in one run, connect latency to an already-allowed
// destination with the hook off and on (the hold must cost it nothing),
// and a held connection's total next to the hook's own time (goal:
// + ≤ 2 ms). Root only; see bench/README.md.
//
//	go run ./bench/approval -n 300 -hook 20ms
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/network"
)

const (
	prefix  = "qz28b"
	subnet  = "10.95.60.0/24"
	extNS   = "xqz28b-ext"
	extIf   = "xqz28b0"
	extHost = "10.95.61.1"
	allowed = "10.95.61.2"
	held    = "10.95.61.3"
	queue   = 3302
)

var heldN int

// hook answers allow once after a fixed delay, and records how long it took.
type hook struct {
	delay time.Duration
	took  []time.Duration
}

func (h *hook) Ask(_ context.Context, _ string, d approval.Dest) approval.Answer {
	start := time.Now()
	time.Sleep(h.delay)
	h.took = append(h.took, time.Since(start))
	return approval.Answer{Verdict: approval.Verdict{Allow: true}, By: approval.ByWebhook, Wait: time.Since(start)}
}

func sh(args ...string) {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		log.Fatalf("%v: %v: %s", args, err, out)
	}
}

// inNS runs fn on a thread in the namespace at path.
func inNS(path string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	h, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return err
	}
	defer netns.Set(orig)
	return fn()
}

func connectTimes(path, addr string, n int) ([]time.Duration, error) {
	var ds []time.Duration
	err := inNS(path, func() error {
		for range n {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return err
			}
			ds = append(ds, time.Since(start))
			c.Close()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return ds, nil
}

func pct(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000
}

func main() {
	n := flag.Int("n", 300, "connections per mode to the allowed destination")
	flag.IntVar(&heldN, "held", 20, "held connections (one every 2.1 s)")
	delay := flag.Duration("hook", 20*time.Millisecond, "the hook's own answer time")
	flag.Parse()
	if os.Geteuid() != 0 {
		log.Fatal("needs root")
	}
	if err := run(*n, *delay); err != nil {
		log.Fatal(err)
	}
}

// run measures; its deferred cleanups run on every error.
func run(n int, delay time.Duration) error {
	ctx := context.Background()
	_ = exec.Command("nft", "delete", "table", "inet", prefix).Run()
	_ = exec.Command("ip", "link", "del", extIf).Run()
	_ = exec.Command("ip", "netns", "del", extNS).Run()
	h := &hook{delay: delay}
	m, err := network.NewManager(ctx, network.Config{Subnet: netip.MustParsePrefix(subnet), NamePrefix: prefix,
		DenyOutExcept:  []netip.Prefix{netip.MustParsePrefix("10.95.61.0/29")},
		ApprovalConfig: network.ApprovalConfig{ApprovalQueue: queue, Approver: h}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer func() {
		_ = m.Teardown(context.Background(), "bench", 1)
		_ = m.Close(context.Background(), true)
		_ = exec.Command("ip", "link", "del", extIf).Run()
		_ = exec.Command("ip", "netns", "del", extNS).Run()
	}()
	sh("ip", "netns", "add", extNS)
	sh("ip", "link", "add", extIf, "type", "veth", "peer", "name", "eth0", "netns", extNS)
	sh("ip", "addr", "add", extHost+"/29", "dev", extIf)
	sh("ip", "link", "set", extIf, "up")
	sh("ip", "-n", extNS, "addr", "add", allowed+"/29", "dev", "eth0")
	sh("ip", "-n", extNS, "addr", "add", held+"/29", "dev", "eth0")
	sh("ip", "-n", extNS, "link", "set", "eth0", "up")
	sh("ip", "-n", extNS, "route", "add", "default", "via", extHost)
	var ls []net.Listener
	if err := inNS("/var/run/netns/"+extNS, func() error {
		for _, a := range []string{allowed, held} {
			l, err := net.Listen("tcp", a+":80")
			if err != nil {
				return err
			}
			ls = append(ls, l)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		return nil
	}); err != nil {
		return err
	}
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	eg := network.Egress{Allow: []netip.Prefix{netip.MustParsePrefix(allowed + "/32")}, Deny: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}
	ep, err := m.Setup(ctx, "bench", 1, network.Options{AllowInternet: true, Egress: eg})
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	set := func(hold bool) error {
		e := eg
		e.Hold = hold
		return m.SetPolicy(ctx, "bench", 1, network.Options{AllowInternet: true, Egress: e})
	}
	// Interleave off/on rounds so the host's load hits both alike.
	var off, on, total []time.Duration
	const rounds = 5
	for range rounds {
		for _, mode := range []struct {
			hold bool
			addr string
			n    int
			into *[]time.Duration
		}{{false, allowed, n / rounds, &off}, {true, allowed, n / rounds, &on}, {true, held, heldN / rounds, &total}} {
			if err := set(mode.hold); err != nil {
				return err
			}
			per := mode.n
			if mode.addr == held {
				per = 1 // one at a time, past allow-once's 2 s window: every held connect asks
			}
			for i := 0; i < mode.n; i += per {
				ds, err := connectTimes(ep.NetNSPath, mode.addr+":80", per)
				if err != nil {
					return err
				}
				*mode.into = append(*mode.into, ds...)
				if mode.addr == held {
					time.Sleep(2100 * time.Millisecond)
				}
			}
		}
	}
	fmt.Printf("connect to an allowOut destination, n=%d each (ms):\n", len(off))
	fmt.Printf("  hook off  p50 %.3f  p99 %.3f\n", pct(off, .5), pct(off, .99))
	fmt.Printf("  hook on   p50 %.3f  p99 %.3f  (ratio p50 %.2f)\n", pct(on, .5), pct(on, .99), pct(on, .5)/pct(off, .5))
	fmt.Printf("held connect (allow once), n=%d (ms):\n", len(total))
	fmt.Printf("  total     p50 %.3f  p99 %.3f\n", pct(total, .5), pct(total, .99))
	fmt.Printf("  hook      p50 %.3f  p99 %.3f\n", pct(h.took, .5), pct(h.took, .99))
	extra := make([]time.Duration, len(total))
	for i := range total {
		extra[i] = total[i] - h.took[i]
	}
	fmt.Printf("  total - hook  p50 %.3f  p99 %.3f\n", pct(extra, .5), pct(extra, .99))
	return nil
}

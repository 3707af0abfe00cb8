//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// client talks to a daemon or the cluster's balancer, one connection per
// request (no keep-alive: nothing of an earlier request lingers).
type client struct {
	url, key string
	hc       *http.Client
}

type answer struct {
	status int
	body   []byte
	node   string
}

func (c *client) do(method, path string, body any, hdr map[string]string) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{}, fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("X-API-Key", c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return answer{status: res.StatusCode, body: b, node: res.Header.Get("X-Airlock-Node")}, nil
}

func (c *client) want(method, path string, body any, hdr map[string]string, codes ...int) (answer, error) {
	a, err := c.do(method, path, body, hdr)
	if err != nil {
		return a, err
	}
	for _, s := range codes {
		if a.status == s {
			return a, nil
		}
	}
	return a, fmt.Errorf("%s %s: %d %s (want %v)", method, path, a.status, bytes.TrimSpace(a.body), codes)
}

type sandbox struct {
	ID    string `json:"sandboxID"`
	Token string `json:"envdAccessToken"`
	node  string
}

func (c *client) create(template string) (sandbox, error) {
	a, err := c.want("POST", "/sandboxes", map[string]any{"templateID": template, "timeout": 600}, nil, 201)
	if err != nil {
		return sandbox{}, err
	}
	var s sandbox
	if err := json.Unmarshal(a.body, &s); err != nil {
		return s, fmt.Errorf("create: %w", err)
	}
	s.node = a.node
	return s, nil
}

func (c *client) kill(s sandbox) {
	_, _ = c.do("DELETE", "/sandboxes/"+s.ID, nil, nil)
}

// exec runs `bash -l -c true` as the SDKs' commands.run("true") does: one
// Connect server-streaming call of process.Process/Start, through the daemon.
func (c *client) exec(s sandbox) error {
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "true"}, "envs": map[string]string{}}})
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.Write(msg)
	req, err := http.NewRequest("POST", c.url+"/process.Process/Start", &env)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", s.ID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("Authorization", "Basic dXNlcjo=") // user "user", as the SDKs send
	if s.Token != "" {
		req.Header.Set("X-Access-Token", s.Token)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("exec: reading the stream: %w", err)
	}
	if res.StatusCode != 200 {
		return fmt.Errorf("exec: %d %s", res.StatusCode, b)
	}
	// The last envelope (flag 2) is the end of the stream; an error is in it.
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if 5+n > len(b) {
			break
		}
		if b[0]&2 != 0 && bytes.Contains(b[5:5+n], []byte(`"error"`)) {
			return fmt.Errorf("exec: %s", b[5:5+n])
		}
		if b[0]&2 == 0 && bytes.Contains(b[5:5+n], []byte(`"exitCode"`)) {
			return fmt.Errorf("exec: `true` exited non-zero: %s", b[5:5+n])
		}
		b = b[5+n:]
	}
	return nil
}

// A path: setup (not traced), the traced request(s), teardown (not traced).
type path struct {
	setup    func(c *client) (any, error)
	request  func(c *client, st any) error
	verify   func(c *client, st any) error // after the trace; may be nil
	teardown func(c *client, st any)
}

func paths(template string) map[string]path {
	one := func(c *client) (any, error) { return c.create(template) }
	kill := func(c *client, st any) {
		if s, ok := st.(sandbox); ok {
			c.kill(s)
		}
	}
	// The created sandbox is killed in teardown, after the trace.
	create := path{
		setup: func(*client) (any, error) { return &sandbox{}, nil },
		request: func(c *client, st any) error {
			s, err := c.create(template)
			*st.(*sandbox) = s
			return err
		},
		teardown: func(c *client, st any) {
			if s := st.(*sandbox); s.ID != "" {
				c.kill(*s)
			}
		},
	}
	// pause on A, resume on B: A is drained (no moves) before, so that the
	// connect after the pause resumes the sandbox on another node; the
	// connect right after the pause waits for its upload, so the upload is
	// in the trace too.
	pauseResume := path{
		setup: func(c *client) (any, error) {
			s, err := c.create(template)
			if err != nil {
				return nil, err
			}
			if s.node == "" {
				c.kill(s)
				return nil, fmt.Errorf("pause-resume needs a cluster: the create answered no X-Airlock-Node")
			}
			if _, err := c.want("POST", "/airlock/v1/nodes/"+s.node+"/drain?move=false", nil, nil, 200); err != nil {
				c.kill(s)
				return nil, err
			}
			time.Sleep(3 * time.Second) // each api instance rereads the nodes every second
			return s, nil
		},
		request: func(c *client, st any) error {
			s := st.(sandbox)
			if _, err := c.want("POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}, nil, 204); err != nil {
				return err
			}
			_, err := c.want("POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}, nil, 200, 201)
			return err
		},
		verify: func(c *client, st any) error {
			s := st.(sandbox)
			a, err := c.want("GET", "/sandboxes/"+s.ID, nil, nil, 200)
			if err != nil {
				return err
			}
			if a.node == "" || a.node == s.node {
				return fmt.Errorf("pause-resume: %s was paused on %s and resumed on %q, not another node", s.ID, s.node, a.node)
			}
			return nil
		},
		teardown: func(c *client, st any) {
			s := st.(sandbox)
			_, _ = c.do("POST", "/airlock/v1/nodes/"+s.node+"/undrain", nil, nil)
			c.kill(s)
		},
	}
	return map[string]path{
		"create":         create,
		"cluster-create": create,
		"exec": {
			setup:    one,
			request:  func(c *client, st any) error { return c.exec(st.(sandbox)) },
			teardown: kill,
		},
		"pause-resume": pauseResume,
	}
}

func cmdRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	state := fs.String("state", "", "the state dir of `pathtrace probe`")
	name := fs.String("path", "", "create | exec | cluster-create | pause-resume")
	url := fs.String("url", "", "the daemon's (or the cluster balancer's) URL")
	key := fs.String("key", "", "the API key")
	template := fs.String("template", "base", "the template the path creates")
	label := fs.String("label", "", "what the row says about the request")
	minBase := fs.Duration("min-baseline", 6*time.Second, "shortest idle baseline window (longer than the daemons' 2–5 s loops)")
	_ = fs.Parse(args)
	st, err := loadState(*state)
	if err != nil {
		return err
	}
	p, ok := paths(*template)[*name]
	if !ok {
		return fmt.Errorf("unknown path %q", *name)
	}
	c := &client{url: strings.TrimRight(*url, "/"), key: *key, hc: &http.Client{
		Timeout: 10 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}}
	t := &tracer{inst: filepath.Join(tracefsRoot, "instances", group)}

	// A warm-up round first (one-time initialisation is not the path), which
	// also says how long the idle baseline window should be.
	t0 := time.Now()
	if err := round(c, p); err != nil {
		return fmt.Errorf("warm-up %s: %w", *name, err)
	}
	warm := time.Since(t0)
	fmt.Fprintf(os.Stderr, "pathtrace: %s warm-up round %s\n", *name, warm.Round(time.Millisecond))

	sv, err := p.setup(c)
	if err != nil {
		return fmt.Errorf("setup of %s: %w", *name, err)
	}
	defer p.teardown(c, sv)
	baseLen := max(*minBase, warm*3/2)
	if err := t.start(); err != nil {
		return err
	}
	time.Sleep(baseLen)
	base, lostB, err := t.stop()
	if err != nil {
		return err
	}
	if err := t.start(); err != nil {
		return err
	}
	t1 := time.Now()
	rerr := p.request(c, sv)
	took := time.Since(t1)
	win, lost, err := t.stop()
	if err != nil {
		return err
	}
	if rerr == nil && p.verify != nil {
		rerr = p.verify(c, sv)
	}
	if rerr != nil {
		return fmt.Errorf("the traced %s: %w", *name, rerr)
	}
	labels := map[int]string{}
	for _, e := range win {
		if _, ok := labels[e.PID]; !ok {
			labels[e.PID] = procLabel(e.PID)
		}
	}
	rec := recording{Path: *name, Label: *label, Seconds: took.Seconds(), Baseline: baseLen.Seconds(), Lost: lost + lostB,
		Labels: labels, Base: base, Window: win}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding the recording: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*state, *name+".events.json"), b, 0o644); err != nil {
		return fmt.Errorf("writing the recording: %w", err)
	}
	return report(*state, st.Funcs, &rec)
}

// recording is what one traced request left: both windows' raw events.
type recording struct {
	Path, Label       string
	Seconds, Baseline float64
	Lost              int
	Labels            map[int]string
	Base, Window      []event
}

// report filters and analyses a recording and writes STATE/<path>.json (the
// row) and STATE/<path>.path.txt (the path, goroutine by goroutine).
func report(state string, fns []fn, rec *recording) error {
	kept, dropped := filterRequest(rec.Base, rec.Window)
	r := &result{Path: rec.Path, Label: rec.Label, Seconds: rec.Seconds, Baseline: rec.Baseline, Dropped: dropped, Lost: rec.Lost}
	detail, err := os.Create(filepath.Join(state, rec.Path+".path.txt"))
	if err != nil {
		return fmt.Errorf("detail file: %w", err)
	}
	defer detail.Close()
	fmt.Fprintf(detail, "# %s (%s): each goroutine's file transitions, with the function entered\n", rec.Path, rec.Label)
	analyze(r, fns, kept, rec.Labels, detail)
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(state, rec.Path+".json"), b, 0o644); err != nil {
		return fmt.Errorf("writing the result: %w", err)
	}
	fmt.Fprintf(os.Stderr, "pathtrace: %s: %d files, %d returns (%d distinct), %d goroutines, %d entries kept, %d dropped, %d lost, %.2fs\n",
		rec.Path, r.Files, r.Returns, r.ReturnEdge, r.Goroutines, r.Events, r.Dropped, r.Lost, r.Seconds)
	return nil
}

// cmdAnalyze reruns the analysis of recorded paths (no tracing, no root).
func cmdAnalyze(args []string) error {
	fs := flag.NewFlagSet("analyze", flag.ExitOnError)
	state := fs.String("state", "", "the state dir")
	_ = fs.Parse(args)
	st, err := loadState(*state)
	if err != nil {
		return err
	}
	for _, name := range []string{"create", "exec", "cluster-create", "pause-resume"} {
		b, err := os.ReadFile(filepath.Join(*state, name+".events.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the recording of %s: %w", name, err)
		}
		var rec recording
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("decoding the recording of %s: %w", name, err)
		}
		if err := report(*state, st.Funcs, &rec); err != nil {
			return err
		}
	}
	return nil
}

func round(c *client, p path) error {
	sv, err := p.setup(c)
	if err != nil {
		return err
	}
	defer p.teardown(c, sv)
	if err := p.request(c, sv); err != nil {
		return err
	}
	if p.verify != nil {
		return p.verify(c, sv)
	}
	return nil
}

// procLabel names a process by its role and data dir, from its command line.
func procLabel(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "exited"
	}
	a := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	role, dir := "single", ""
	for i := 0; i+1 < len(a); i++ {
		switch a[i] {
		case "--role":
			role = a[i+1]
		case "--data-dir":
			dir = filepath.Base(a[i+1])
		}
	}
	if len(a) > 1 && a[1] != "serve" {
		return strings.Join(a[1:min(len(a), 3)], " ")
	}
	return role + " " + dir
}

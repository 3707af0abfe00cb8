package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

const fakeKey = "e2b_00112233445566778899aabbccddeeff00112233"

type fakeSandbox struct {
	ID, Template, State, Token string
	Metadata                   map[string]string
	StartedAt, EndAt           time.Time
}

// fakeDaemon mimics the wire of `airlock serve`: the E2B REST API, the
// template build stream, and one in-memory agent per sandbox reached through
// E2b-Sandbox-Id/E2b-Sandbox-Port headers.
type fakeDaemon struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	sandboxes   map[string]*fakeSandbox
	createBody  map[string]any
	listQueries []string
	timeouts    map[string]int
	files       map[string][]byte // absolute path → content (all sandboxes share it)
	dirs        map[string]bool
	lastStart   *processpb.StartRequest
	lastAuth    string
	stdin       chan []byte
	signals     []processpb.Signal
	ptyInput    []byte
	updates     []*processpb.PTY_Size
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	d := &fakeDaemon{
		t:         t,
		sandboxes: map[string]*fakeSandbox{},
		timeouts:  map[string]int{},
		files:     map[string][]byte{},
		dirs:      map[string]bool{"/": true, "/home": true, "/home/user": true},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/sandboxes", d.create)
	mux.HandleFunc("GET /v2/sandboxes", d.list)
	mux.HandleFunc("GET /sandboxes/{id}", d.get)
	mux.HandleFunc("DELETE /sandboxes/{id}", d.kill)
	mux.HandleFunc("POST /sandboxes/{id}/timeout", d.setTimeout)
	mux.HandleFunc("GET /templates", d.templates)
	mux.HandleFunc("POST /airlock/v1/templates/{name}/build", d.build)

	agent := http.NewServeMux()
	agent.Handle(processpbconnect.NewProcessHandler(&fakeProc{d: d}))
	agent.Handle(filesystempbconnect.NewFilesystemHandler(&fakeFS{d: d}))
	agent.HandleFunc("/files", d.filesHandler)

	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			d.mu.Lock()
			sb := d.sandboxes[id]
			d.mu.Unlock()
			if sb == nil || r.Header.Get("E2b-Sandbox-Port") != "49983" {
				jsonReply(w, 502, map[string]any{"sandboxId": id, "message": "sandbox not found", "code": 502})
				return
			}
			if r.Header.Get("X-Access-Token") != sb.Token {
				jsonErr(w, 401, "invalid access token")
				return
			}
			agent.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("X-Api-Key") != fakeKey {
			jsonErr(w, 401, "invalid API key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func jsonReply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func jsonErr(w http.ResponseWriter, status int, msg string) {
	jsonReply(w, status, map[string]any{"code": status, "message": msg})
}

func (d *fakeDaemon) addSandbox(id string, meta map[string]string) *fakeSandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	start := time.Date(2026, 11, 22, 10, 0, len(d.sandboxes), 0, time.UTC)
	sb := &fakeSandbox{ID: id, Template: "base", State: "running", Token: "tok-" + id, Metadata: meta,
		StartedAt: start, EndAt: start.Add(5 * time.Minute)}
	d.sandboxes[id] = sb
	return sb
}

func listed(sb *fakeSandbox) map[string]any {
	return map[string]any{
		"templateID": sb.Template, "sandboxID": sb.ID, "clientID": "6532622b",
		"startedAt": sb.StartedAt, "endAt": sb.EndAt, "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024,
		"metadata": sb.Metadata, "state": sb.State, "envdVersion": "0.6.13",
	}
}

func (d *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	d.mu.Lock()
	d.createBody = body
	id := fmt.Sprintf("inew%d", len(d.sandboxes))
	d.mu.Unlock()
	meta := map[string]string{}
	if m, ok := body["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = fmt.Sprint(v)
		}
	}
	sb := d.addSandbox(id, meta)
	jsonReply(w, 201, map[string]any{"sandboxID": sb.ID, "templateID": "base", "clientID": "6532622b",
		"envdVersion": "0.6.13", "envdAccessToken": sb.Token})
}

// list pages two at a time; nextToken is the index of the next item.
func (d *fakeDaemon) list(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.listQueries = append(d.listQueries, r.URL.RawQuery)
	var ids []string
	for id, sb := range d.sandboxes {
		if st := r.URL.Query().Get("state"); st != "" && !strings.Contains(st, sb.State) {
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	from, _ := strconv.Atoi(r.URL.Query().Get("nextToken"))
	to := min(from+2, len(ids))
	out := []any{}
	for _, id := range ids[from:to] {
		out = append(out, listed(d.sandboxes[id]))
	}
	if to < len(ids) {
		w.Header().Set("X-Next-Token", strconv.Itoa(to))
	}
	jsonReply(w, 200, out)
}

func (d *fakeDaemon) lookup(w http.ResponseWriter, r *http.Request) *fakeSandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	sb := d.sandboxes[r.PathValue("id")]
	if sb == nil {
		jsonErr(w, 404, fmt.Sprintf("sandbox %q not found", r.PathValue("id")))
	}
	return sb
}

func (d *fakeDaemon) get(w http.ResponseWriter, r *http.Request) {
	if sb := d.lookup(w, r); sb != nil {
		m := listed(sb)
		m["envdAccessToken"] = sb.Token
		m["allowInternetAccess"] = true
		jsonReply(w, 200, m)
	}
}

func (d *fakeDaemon) kill(w http.ResponseWriter, r *http.Request) {
	if sb := d.lookup(w, r); sb != nil {
		d.mu.Lock()
		delete(d.sandboxes, sb.ID)
		d.mu.Unlock()
		w.WriteHeader(204)
	}
}

func (d *fakeDaemon) setTimeout(w http.ResponseWriter, r *http.Request) {
	if sb := d.lookup(w, r); sb != nil {
		var body struct{ Timeout int }
		json.NewDecoder(r.Body).Decode(&body)
		d.mu.Lock()
		d.timeouts[sb.ID] = body.Timeout
		d.mu.Unlock()
		w.WriteHeader(204)
	}
}

func (d *fakeDaemon) templates(w http.ResponseWriter, r *http.Request) {
	jsonReply(w, 200, []map[string]any{
		{"templateID": "base", "buildID": "3f9a", "aliases": []string{"base"}, "sizeBytes": 734003200, "createdAt": "2026-11-22T09:00:00Z", "tags": []string{"default", "v2"}},
		{"templateID": "code-interpreter-v1", "buildID": "77aa", "createdAt": "2026-11-22T09:30:00Z"},
	})
}

func (d *fakeDaemon) build(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name == "broken" {
		fmt.Fprintln(w, `{"phase":"bootstrap","message":"resolving","done":0,"total":2}`)
		fmt.Fprintln(w, `{"error":"mmdebstrap failed: exit status 1"}`)
		return
	}
	force := r.URL.Query().Get("force")
	fmt.Fprintln(w, `{"phase":"bootstrap","message":"downloading","done":1,"total":2}`)
	fmt.Fprintln(w, `{"phase":"bootstrap","message":"unpacking","done":2,"total":2}`)
	fmt.Fprintf(w, `{"done":true,"template":{"templateID":%q,"buildID":"force-%s"}}`+"\n", name, force)
}

// ---- agent: /files ----

func (d *fakeDaemon) filesHandler(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if !path.IsAbs(p) {
		p = path.Join("/home/user", p)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if d.dirs[p] {
			jsonErr(w, 400, "path '"+p+"' is a directory")
			return
		}
		b, ok := d.files[p]
		if !ok {
			jsonErr(w, 404, "path '"+p+"' does not exist")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	case http.MethodPost:
		if r.Header.Get("Content-Type") != "application/octet-stream" {
			jsonErr(w, 400, "unsupported content type")
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			jsonErr(w, 400, err.Error())
			return
		}
		for dir := path.Dir(p); !d.dirs[dir]; dir = path.Dir(dir) {
			d.dirs[dir] = true
		}
		d.files[p] = b
		jsonReply(w, 200, []map[string]string{{"path": p, "name": path.Base(p), "type": "file"}})
	}
}

// ---- agent: filesystem ----

type fakeFS struct {
	filesystempbconnect.UnimplementedFilesystemHandler
	d *fakeDaemon
}

func (f *fakeFS) entry(p string) *filesystempb.EntryInfo {
	if f.d.dirs[p] {
		return &filesystempb.EntryInfo{Name: path.Base(p), Path: p, Type: filesystempb.FileType_FILE_TYPE_DIRECTORY, Mode: 0o755}
	}
	if b, ok := f.d.files[p]; ok {
		return &filesystempb.EntryInfo{Name: path.Base(p), Path: p, Type: filesystempb.FileType_FILE_TYPE_FILE, Size: int64(len(b)), Mode: 0o640}
	}
	return nil
}

func resolve(p string) string {
	if p == "" {
		return "/home/user"
	}
	if !path.IsAbs(p) {
		return path.Join("/home/user", p)
	}
	return path.Clean(p)
}

func (f *fakeFS) Stat(_ context.Context, r *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	e := f.entry(resolve(r.Msg.GetPath()))
	if e == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such file or directory"))
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: e}), nil
}

func (f *fakeFS) MakeDir(_ context.Context, r *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	p := resolve(r.Msg.GetPath())
	if f.d.dirs[p] {
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("exists"))
	}
	for dir := p; !f.d.dirs[dir]; dir = path.Dir(dir) {
		f.d.dirs[dir] = true
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: f.entry(p)}), nil
}

func (f *fakeFS) ListDir(_ context.Context, r *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	root := resolve(r.Msg.GetPath())
	if !f.d.dirs[root] {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("not a directory"))
	}
	depth := int(max(r.Msg.GetDepth(), 1))
	var out []*filesystempb.EntryInfo
	add := func(p string) {
		rel := strings.TrimPrefix(p, root+"/")
		if p != root && strings.HasPrefix(p, root+"/") && strings.Count(rel, "/") < depth {
			out = append(out, f.entry(p))
		}
	}
	for p := range f.d.dirs {
		add(p)
	}
	for p := range f.d.files {
		add(p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: out}), nil
}

// ---- agent: process ----

type fakeProc struct {
	processpbconnect.UnimplementedProcessHandler
	d *fakeDaemon
}

func send(s *connect.ServerStream[processpb.StartResponse], e *processpb.ProcessEvent) error {
	return s.Send(&processpb.StartResponse{Event: e})
}

func dataEv(stdout, stderr, pty []byte) *processpb.ProcessEvent {
	var out processpb.ProcessEvent_DataEvent
	switch {
	case stdout != nil:
		out.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: stdout}
	case stderr != nil:
		out.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: stderr}
	default:
		out.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: pty}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &out}}
}

func endEv(code int32, status string) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: code, Exited: code >= 0, Status: status}}}
}

// Start interprets a tiny script language: the bash -c script (or raw argv)
// "out X; err Y; exit N", "cat" (echo stdin until closed), "sleep" (wait
// for a signal) and, with a PTY, an echo shell ended by the input "exit\r".
func (p *fakeProc) Start(ctx context.Context, r *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	d := p.d
	d.mu.Lock()
	d.lastStart = r.Msg
	d.lastAuth = r.Header().Get("Authorization")
	d.stdin = make(chan []byte, 16)
	stdin := d.stdin
	d.mu.Unlock()
	if err := send(s, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 4242}}}); err != nil {
		return err
	}
	cfg := r.Msg.GetProcess()
	script := strings.Join(append([]string{cfg.GetCmd()}, cfg.GetArgs()...), " ")
	if cfg.GetCmd() == "/bin/bash" && len(cfg.GetArgs()) == 3 {
		script = cfg.GetArgs()[2]
	}
	if r.Msg.GetPty() != nil {
		for {
			select {
			case b, ok := <-stdin:
				if !ok || strings.Contains(string(b), "exit\r") {
					return send(s, endEv(0, "exit status 0"))
				}
				send(s, dataEv(nil, nil, append([]byte("echo:"), b...)))
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	switch script {
	case "cat":
		for b := range stdin {
			send(s, dataEv(b, nil, nil))
		}
		return send(s, endEv(0, "exit status 0"))
	case "sleep":
		for {
			select {
			case _, ok := <-stdin:
				if !ok {
					return send(s, endEv(-1, "signal: killed"))
				}
			case <-ctx.Done():
				return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
			}
		}
	}
	code := int32(0)
	for _, stmt := range strings.Split(script, ";") {
		verb, arg, _ := strings.Cut(strings.TrimSpace(stmt), " ")
		switch verb {
		case "out":
			send(s, dataEv([]byte(arg+"\n"), nil, nil))
		case "err":
			send(s, dataEv(nil, []byte(arg+"\n"), nil))
		case "exit":
			n, _ := strconv.Atoi(arg)
			code = int32(n)
		}
	}
	return send(s, endEv(code, "exit status "+strconv.Itoa(int(code))))
}

func (p *fakeProc) SendInput(_ context.Context, r *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p.d.mu.Lock()
	ch := p.d.stdin
	if b := r.Msg.GetInput().GetPty(); b != nil {
		p.d.ptyInput = append(p.d.ptyInput, b...)
		ch <- b
	} else {
		ch <- r.Msg.GetInput().GetStdin()
	}
	p.d.mu.Unlock()
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

func (p *fakeProc) CloseStdin(_ context.Context, r *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p.d.mu.Lock()
	close(p.d.stdin)
	p.d.mu.Unlock()
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

func (p *fakeProc) SendSignal(_ context.Context, r *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if r.Msg.GetProcess().GetPid() != 4242 {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such process"))
	}
	p.d.signals = append(p.d.signals, r.Msg.GetSignal())
	close(p.d.stdin) // ends "sleep" with signal: killed
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func (p *fakeProc) Update(_ context.Context, r *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p.d.mu.Lock()
	p.d.updates = append(p.d.updates, r.Msg.GetPty().GetSize())
	p.d.mu.Unlock()
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

func basicUserOf(h string) string {
	b, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
	return strings.TrimSuffix(string(b), ":")
}

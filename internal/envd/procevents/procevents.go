//go:build linux

// Package procevents gives a microVM's activity feed its process entries
// (issue 28): the agent subscribes, at boot (Start), to the guest kernel's proc connector
// (netlink NETLINK_CONNECTOR, group CN_IDX_PROC; CONFIG_PROC_EVENTS) and
// gets one message per exec and per exit, without polling. At an exec it
// reads the process's argv, executable, parent, uid and cwd from
// /proc/<pid>; at the exit of a process it saw exec it reports the exit
// code or signal. The entries have exactly the shapes of the gVisor path
// (internal/activity's Tracer): "process.start" {pid, ppid, path, argv,
// uid, cwd} and "process.exit" {pid, argv, exitCode | signal}.
//
// Events wait in a bounded ring (RingSize) with a sequence number; the
// daemon follows them over GET Path?after=N (newline-delimited JSON that
// stays open), so a stream broken by a pause, a snapshot or a daemon
// restart resumes where it stopped, and nothing is lost between the boot
// and the daemon's first request. The connector is opened by the first
// request (only the daemon of a microVM makes it); until then the agent
// does nothing.
package procevents

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Path is the agent endpoint the daemon follows (the proxy never forwards
// it).
const Path = "/airlock/process-events"

// RingSize is how many events the agent keeps for a follower that is not
// connected (paused sandbox, daemon restart).
const RingSize = 4096

// maxProcs bounds the exec'd processes remembered for their exit.
const maxProcs = 4096

// Event is one entry for the feed.
type Event struct {
	Seq  uint64         `json:"seq"`
	Time time.Time      `json:"time"`
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// Proc connector constants (linux/cn_proc.h, linux/connector.h).
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procEventExec     = 0x00000002
	procEventExit     = 0x80000000
	nlmsgHdrLen       = 16
	cnMsgLen          = 20
)

// Raw is one decoded proc connector event the feed uses.
type Raw struct {
	What     uint32
	PID      int32 // process_pid (thread id)
	TGID     int32 // process_tgid
	ExitCode uint32
}

// Parse decodes the proc connector events in one netlink datagram b.
// Events other than exec and exit, and malformed messages, are skipped.
func Parse(b []byte) []Raw {
	var out []Raw
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < nlmsgHdrLen || l > len(b) {
			return out
		}
		msg := b[nlmsgHdrLen:l]
		if len(msg) >= cnMsgLen && binary.NativeEndian.Uint32(msg[0:4]) == cnIdxProc && binary.NativeEndian.Uint32(msg[4:8]) == cnValProc {
			dlen := int(binary.NativeEndian.Uint16(msg[16:18]))
			ev := msg[cnMsgLen:]
			if dlen <= len(ev) {
				ev = ev[:dlen]
			}
			// struct proc_event: what u32, cpu u32, timestamp_ns u64, event_data.
			if len(ev) >= 16 {
				what := binary.NativeEndian.Uint32(ev[0:4])
				d := ev[16:]
				switch {
				case what == procEventExec && len(d) >= 8:
					out = append(out, Raw{What: what, PID: int32(binary.NativeEndian.Uint32(d[0:4])), TGID: int32(binary.NativeEndian.Uint32(d[4:8]))})
				case what == procEventExit && len(d) >= 12:
					out = append(out, Raw{What: what, PID: int32(binary.NativeEndian.Uint32(d[0:4])), TGID: int32(binary.NativeEndian.Uint32(d[4:8])),
						ExitCode: binary.NativeEndian.Uint32(d[8:12])})
				}
			}
		}
		l = (l + 3) &^ 3 // NLMSG_ALIGN
		if l > len(b) {
			return out
		}
		b = b[l:]
	}
	return out
}

// listenMsg is the PROC_CN_MCAST_LISTEN request.
func listenMsg() []byte {
	b := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(b[12:], uint32(os.Getpid()))
	c := b[nlmsgHdrLen:]
	binary.NativeEndian.PutUint32(c[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(c[4:], cnValProc)
	binary.NativeEndian.PutUint16(c[16:], 4)
	binary.NativeEndian.PutUint32(c[cnMsgLen:], procCnMcastListen)
	return b
}

// Source keeps the events and serves Path. The zero value is not usable:
// use New.
type Source struct {
	log *slog.Logger
	// proc is the /proc to read (tests use a fake tree).
	proc string

	startOnce sync.Once
	startErr  error
	logOnce   sync.Once

	mu     sync.Mutex
	ring   []Event // oldest first, at most RingSize
	next   uint64  // seq of the next event
	notify chan struct{}
	procs  map[int32][]string // argv of exec'd processes by tgid
}

// New returns a Source reading /proc.
func New(log *slog.Logger) *Source {
	if log == nil {
		log = slog.Default()
	}
	return &Source{log: log.With("component", "procevents"), proc: "/proc", next: 1, notify: make(chan struct{}), procs: map[int32][]string{}}
}

// Start opens the connector and reads it until the agent ends: the agent
// calls it at boot, so the ring holds every process from then on (a
// stream that the daemon opens later, after a create's first command,
// loses nothing). ServeHTTP calls it too; the second call does nothing.
func (s *Source) Start() error { return s.start() }

// start opens the connector (once) and reads it until the agent ends.
func (s *Source) start() error {
	s.startOnce.Do(func() {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
		if err != nil {
			s.startErr = fmt.Errorf("opening the proc connector: %w", err)
			return
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
			unix.Close(fd)
			s.startErr = fmt.Errorf("binding the proc connector: %w", err)
			return
		}
		// A burst (a build) must not overflow the socket: 4 MiB.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
		if err := unix.Sendto(fd, listenMsg(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			s.startErr = fmt.Errorf("subscribing to process events: %w", err)
			return
		}
		go s.read(fd)
	})
	if s.startErr != nil {
		s.logOnce.Do(func() { s.log.Error("process events unavailable", "err", s.startErr) })
	}
	return s.startErr
}

func (s *Source) read(fd int) {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			if err == unix.ENOBUFS {
				s.log.Warn("process events lost: the connector's buffer overflowed")
				continue
			}
			s.log.Error("reading process events", "err", err)
			return
		}
		for _, r := range Parse(buf[:n]) {
			s.Handle(r, time.Now())
		}
	}
}

// Handle turns one connector event into a feed event (exported for tests).
func (s *Source) Handle(r Raw, now time.Time) {
	switch r.What {
	case procEventExec:
		pid := r.TGID
		if pid == int32(os.Getpid()) {
			return
		}
		data := s.describe(pid)
		argv, _ := data["argv"].([]string)
		s.mu.Lock()
		if len(s.procs) >= maxProcs {
			s.procs = map[int32][]string{}
		}
		s.procs[pid] = argv
		s.mu.Unlock()
		s.add(now, "process.start", data)
	case procEventExit:
		if r.PID != r.TGID {
			return // a thread, not the process
		}
		s.mu.Lock()
		argv, ok := s.procs[r.TGID]
		delete(s.procs, r.TGID)
		s.mu.Unlock()
		if !ok {
			return // a fork that never executed anything (as on gVisor)
		}
		data := map[string]any{"pid": r.TGID, "argv": argv}
		if sig := r.ExitCode & 0x7f; sig != 0 {
			data["signal"] = sig
		} else {
			data["exitCode"] = (r.ExitCode >> 8) & 0xff
		}
		s.add(now, "process.exit", data)
	}
}

// describe reads what process.start carries from /proc/<pid>. A process
// gone already leaves the fields it could not read empty.
func (s *Source) describe(pid int32) map[string]any {
	dir := filepath.Join(s.proc, strconv.Itoa(int(pid)))
	argv := []string{}
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && len(b) > 0 {
		argv = strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00")
	}
	path, _ := os.Readlink(filepath.Join(dir, "exe"))
	cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
	var ppid int32
	var uid uint32
	if b, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			f := strings.Fields(v)
			if len(f) == 0 {
				continue
			}
			switch k {
			case "PPid":
				n, _ := strconv.ParseInt(f[0], 10, 32)
				ppid = int32(n)
			case "Uid":
				n, _ := strconv.ParseUint(f[0], 10, 32) // real uid, as gVisor's credentials
				uid = uint32(n)
			}
		}
	}
	return map[string]any{"pid": pid, "ppid": ppid, "path": path, "argv": argv, "uid": uid, "cwd": cwd}
}

func (s *Source) add(now time.Time, typ string, data map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = append(s.ring, Event{Seq: s.next, Time: now.UTC(), Type: typ, Data: data})
	s.next++
	if len(s.ring) > RingSize {
		s.ring = append(s.ring[:0:0], s.ring[len(s.ring)-RingSize:]...)
	}
	close(s.notify)
	s.notify = make(chan struct{})
}

// after returns the events with seq > after, and a channel closed when
// the next one is added.
func (s *Source) after(after uint64) ([]Event, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.ring)
	for i > 0 && s.ring[i-1].Seq > after {
		i--
	}
	return append([]Event(nil), s.ring[i:]...), s.notify
}

// Head is the seq of the newest event (0: none yet).
func (s *Source) Head() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next - 1
}

// clockLine is the stream's first line: the guest's time when it opened.
type clockLine struct {
	Type string    `json:"type"`
	Time time.Time `json:"time"`
}

// ServeHTTP streams the events after ?after=N (default: only new ones,
// ?after=0: every one kept) as newline-delimited JSON until the client
// goes. The caller authenticates the request.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if err := s.start(); err != nil {
		http.Error(w, err.Error(), http.StatusNotImplemented)
		return
	}
	after := s.Head()
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "after: not a number", http.StatusBadRequest)
			return
		}
		after = n
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	// The guest's clock first: the host corrects the events' times by how
	// far it is behind or ahead (an emulated guest's clock drifts under
	// load), so they compare with its own.
	if err := enc.Encode(clockLine{Type: "clock", Time: time.Now()}); err != nil {
		return
	}
	_ = rc.Flush()
	for {
		evs, more := s.after(after)
		for _, e := range evs {
			if err := enc.Encode(e); err != nil {
				return
			}
			after = e.Seq
		}
		if len(evs) > 0 {
			if err := rc.Flush(); err != nil {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-more:
		}
	}
}

//go:build linux

// Command airlock-envd is the agent that runs inside every sandbox (usually
// as its PID 1). It serves the E2B envd protocol on port 49983.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/freeze"
	"github.com/airlock-sandbox/airlock/internal/envd/interpreter"
	"github.com/airlock-sandbox/airlock/internal/envd/oomguard"
	"github.com/airlock-sandbox/airlock/internal/envd/process"
	"github.com/airlock-sandbox/airlock/internal/envd/procevents"
	"github.com/airlock-sandbox/airlock/internal/envd/server"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/internal/envd/sudo"
	"github.com/airlock-sandbox/airlock/internal/envd/vminit"
	"github.com/airlock-sandbox/airlock/internal/envd/wake"
	"github.com/airlock-sandbox/airlock/internal/guest"
)

func main() {
	// Mounted over /usr/bin/sudo on runtimes that force no_new_privs.
	if filepath.Base(os.Args[0]) == "sudo" {
		os.Exit(sudo.Main(os.Args[1:]))
	}
	// /init of a microVM: switch to the sandbox's root disk and re-exec
	// (Boot returns only on failure).
	if vminit.InVM() {
		err := vminit.Boot()
		fmt.Fprintln(os.Stderr, "airlock-envd: booting the microVM:", err)
		vminit.PowerOff()
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-envd:", err)
		if vminit.Booted() {
			vminit.PowerOff() // init of a microVM must never exit
		}
		os.Exit(1)
	}
	if vminit.Booted() {
		vminit.PowerOff()
	}
}

func run() error {
	port := flag.Int("port", guest.EnvdPort, "TCP port to listen on")
	addr := flag.String("addr", "", "address to listen on (default all interfaces)")
	defUser := flag.String("default-user", defaultUser(), "user for requests that name none")
	debug := flag.Bool("debug", false, "debug logging")
	interpPort := flag.Int("interpreter-port", guest.InterpreterPort, "TCP port of the code interpreter")
	interpMode := flag.String("interpreter", "auto", "code interpreter: auto (when ipykernel is installed), on, off")
	version := flag.Bool("version", false, "print the envd protocol version and exit")
	syncOnly := flag.Bool("sync", false, "flush all filesystem buffers (sync(2)) and exit; template builds use it, so images without sync(1) work")
	flag.Parse()
	if *version {
		fmt.Println(state.Version)
		return nil
	}
	if *syncOnly {
		unix.Sync()
		return nil
	}

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if os.Getpid() == 1 {
		go process.NewReaper(log).Run(ctx)
	}
	// Runtimes whose guest kernel has no OOM killer (gVisor) turn on the
	// agent's own (AIRLOCK_OOM_GUARD_MB): a process over the sandbox's
	// memory dies, the sandbox lives.
	go oomguard.FromEnv(log.With("component", "oomguard")).Run(ctx)

	if os.Geteuid() == 0 {
		go func() {
			if err := sudo.Serve(ctx, sudo.SocketPath, log.With("component", "sudo")); err != nil {
				log.Error("sudo service", "err", err)
			}
		}()
	}

	st := state.New(*defUser)
	h := server.New(st, log, server.Options{})
	if c, ok := h.(io.Closer); ok {
		defer c.Close()
	}
	fz := freeze.New(log.With("component", "freeze"))
	thawOnSignal(ctx, fz)
	serveWake(ctx, fz, log.With("component", "wake"))
	// The interpreter listens before the agent's port does: the daemon
	// hands a sandbox out once the agent answers, and the first runCode
	// must then find port 49999 open (on a cold, emulated microVM the
	// interpreter check reads the disk and took long enough to lose).
	if interpreterWanted(*interpMode) {
		isrv, err := startInterpreter(ctx, st, log, fz, net.JoinHostPort(*addr, strconv.Itoa(*interpPort)))
		if err != nil {
			return err
		}
		defer isrv.Close()
	}
	listenAddr := net.JoinHostPort(*addr, strconv.Itoa(*port))
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listenAddr, err)
	}
	srv := server.NewHTTPServer(listenAddr, withProcEvents(st, log, withActivity(withFreeze(fz, h))), log)
	log.Info("airlock-envd listening", "addr", ln.Addr().String(), "version", state.Version,
		"defaultUser", *defUser, "pid", os.Getpid())

	errc := make(chan error, 1)
	go func() { errc <- fz.Serve(srv, ln) }()

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Streams (long-running commands, watches) do not finish by themselves.
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// interpreterWanted decides whether to serve the code interpreter.
func interpreterWanted(mode string) bool {
	switch mode {
	case "on":
		return true
	case "off":
		return false
	}
	for _, dir := range []string{"/usr/lib/python3/dist-packages/ipykernel", "/usr/local/lib/python3/dist-packages/ipykernel"} {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// startInterpreter serves the stateful code interpreter (spec §4) and warms
// the default Python context in the background (the JavaScript one starts on
// its first use).
func startInterpreter(ctx context.Context, st *state.State, log *slog.Logger, fz *freeze.Freezer, addr string) (io.Closer, error) {
	ilog := log.With("component", "interpreter")
	// The template chooses the warm-up (a file in its root filesystem); an
	// unreadable one falls back to the default, logged.
	warmup, from, err := interpreter.LoadWarmup(interpreter.WarmupFile)
	if err != nil {
		ilog.Warn("interpreter warm-up: using the default", "err", err)
	}
	ilog.Info("interpreter warm-up", "from", from)
	isvc, err := interpreter.New(st, ilog, interpreter.Options{
		StateDir: "/run/airlock-interpreter", Warmup: warmup,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	// The default contexts are listed from the first request on: register
	// them before serving (their kernels start in the background).
	isvc.StartDefaults(ctx)
	srv := server.NewHTTPServer(addr, withActivity(isvc.Handler()), log)
	go func() {
		if err := fz.Serve(srv, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("interpreter server", "err", err)
		}
	}()
	log.Info("code interpreter listening", "addr", ln.Addr().String())
	return closerFunc(func() error {
		_ = srv.Close()
		isvc.Close()
		return nil
	}), nil
}

// withActivity tells the OOM guard that a request is in progress: it
// checks memory closely while the sandbox is in use (oomguard.Activity).
func withActivity(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := oomguard.Activity()
		defer done()
		h.ServeHTTP(w, r)
	})
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// defaultUser is "user" when that account exists, else "root".
func defaultUser() string {
	if _, err := user.Lookup("user"); err == nil {
		return "user"
	}
	return "root"
}

// withProcEvents serves the daemon's GET procevents.Path (the activity
// feed's process entries) on a microVM, outside withActivity: the stream
// stays open and is no request in progress for the OOM guard. On gVisor
// the runtime's monitoring gives those entries; the path is not served.
func withProcEvents(st *state.State, log *slog.Logger, h http.Handler) http.Handler {
	if !vminit.Booted() {
		return h
	}
	src := procevents.New(log)
	// Listen from boot, not from the daemon's first stream: a create's
	// first command runs before the daemon's follower connects.
	_ = src.Start() // an error is logged, and the stream answers 501
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != procevents.Path {
			h.ServeHTTP(w, r)
			return
		}
		if !st.CheckToken(r.Header.Get("X-Access-Token")) {
			http.Error(w, "invalid or missing access token (X-Access-Token)", http.StatusUnauthorized)
			return
		}
		src.ServeHTTP(w, r)
	})
}

// withFreeze serves the daemon's POST /freeze (checkpoint preparation; the
// proxy never forwards it) and everything else with h.
func withFreeze(fz *freeze.Freezer, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == freeze.Path && vminit.Booted() {
			// A microVM snapshot keeps the guest's TCP state: nothing to
			// close. After a restore the daemon sends its clock.
			if v := r.Header.Get(vminit.ClockHeader); v != "" {
				if _, err := vminit.SyncClock(v); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				// Restored: the kernel's RNG is the saved one, shared with
				// every other VM restored from the same state.
				if err := vminit.Reseed(5 * time.Second); err != nil {
					slog.Error("reseeding the kernel RNG after a restore", "err", err)
					http.Error(w, "reseeding the kernel RNG: "+err.Error(), http.StatusInternalServerError)
					return
				}
			}
			if a := r.Header.Get(vminit.AddrHeader); a != "" {
				// A fork: move to the child's own address after answering.
				addr, gw, err := vminit.ParseAddress(a, r.Header.Get(vminit.GatewayHeader))
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				// Volumes: drop the NFS connections while the old
				// address can still close them.
				if err := vminit.ReconnectVolumes(time.Second); err != nil {
					slog.Error("reconnecting volumes before re-addressing", "err", err)
				}
				go func() {
					if err := vminit.Readdress(addr, gw, 50*time.Millisecond); err != nil {
						slog.Error("re-addressing eth0", "addr", addr, "err", err)
					}
				}()
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.URL.Path == freeze.Path {
			fz.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serveWake serves the wake port (internal/envd/wake): the daemon's datagram
// after a restore thaws the listeners, and its datagram when the sandbox's
// memory grew wakes the OOM guard. Without the port the daemon falls back
// to the signals (thawOnSignal, oomguard.WakeSignal).
func serveWake(ctx context.Context, fz *freeze.Freezer, log *slog.Logger) {
	conn, err := wake.Listen(guest.WakePort)
	if err != nil {
		log.Warn("no wake port; the host wakes the agent with signals", "port", guest.WakePort, "err", err)
		return
	}
	go func() {
		_ = wake.Serve(ctx, conn, map[string]func(){guest.WakeThaw: func() { fz.ThawWait(time.Second) }, guest.WakeOOM: oomguard.Wake}, log)
	}()
}

// thawOnSignal reopens the listeners when the daemon sends SIGUSR1 after
// restoring the sandbox (daemons older than the wake port, and the
// fallback when the wake datagram gets no answer).
func thawOnSignal(ctx context.Context, fz *freeze.Freezer) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				signal.Stop(ch)
				return
			case <-ch:
				fz.Thaw()
			}
		}
	}()
}

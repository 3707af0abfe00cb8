//go:build linux

// Package daemonlock keeps two Airlock daemons from sharing what only one
// may own: a data directory, and a network name prefix (network
// namespaces, host veths and the nftables table are named after it, and a
// daemon rebuilds its table and removes "stale" veths of its prefix at
// start). Each is an exclusive flock(2) on a file that names its holder;
// the kernel drops it when the holder dies, SIGKILL included, so a
// restarted daemon never finds a stale lock.
package daemonlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultRunDir holds the network prefix locks (a tmpfs: cleared at boot).
const DefaultRunDir = "/run/airlock"

// HeldError says that another process holds a lock.
type HeldError struct {
	What   string // "the data directory /var/lib/airlock", "--net-prefix al"
	Path   string // the lock file
	Holder string // what the holder wrote: pid and command line
}

func (e *HeldError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another process (it wrote no details)"
	}
	return fmt.Sprintf("%s is in use by another airlock daemon: %s (lock %s); stop it, or give this one its own --data-dir, --net-prefix and --subnet", e.What, holder, e.Path)
}

// Lock is a held lock; Close releases it.
type Lock struct {
	f *os.File
}

// Close releases the lock.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Acquire takes the exclusive lock at path (created 0600 if missing) for
// what, without waiting, and writes holder into it. A lock held elsewhere
// is a *HeldError naming that holder.
func Acquire(path, what, holder string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{What: what, Path: path, Holder: readHolder(path)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(holder+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

func readHolder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// held reports whether some process holds an exclusive lock on path (a
// shared lock cannot be had without waiting).
func held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

const prefixLockPrefix = "net-"

// AcquireNetPrefix takes the lock of network name prefix in runDir, and
// refuses as well when a running daemon holds a prefix that starts with
// this one or that this one starts with ("al" and "ale2e" name each
// other's namespaces and veths).
func AcquireNetPrefix(runDir, prefix, holder string) (*Lock, error) {
	if prefix == "" || strings.ContainsAny(prefix, "/\x00") {
		return nil, fmt.Errorf("invalid network prefix %q", prefix)
	}
	what := "--net-prefix " + prefix
	l, err := Acquire(filepath.Join(runDir, prefixLockPrefix+prefix+".lock"), what, holder)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(runDir)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("listing %s: %w", runDir, err)
	}
	for _, e := range ents {
		other, ok := strings.CutPrefix(e.Name(), prefixLockPrefix)
		if !ok {
			continue
		}
		if other, ok = strings.CutSuffix(other, ".lock"); !ok || other == prefix {
			continue
		}
		if !strings.HasPrefix(other, prefix) && !strings.HasPrefix(prefix, other) {
			continue
		}
		path := filepath.Join(runDir, e.Name())
		if held(path) {
			l.Close()
			return nil, &HeldError{What: fmt.Sprintf("%s (it overlaps --net-prefix %s: one is the start of the other)", what, other),
				Path: path, Holder: readHolder(path)}
		}
	}
	return l, nil
}

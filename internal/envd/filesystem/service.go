//go:build linux

package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// Service implements filesystempbconnect.FilesystemHandler.
type Service struct {
	st    *state.State
	log   *slog.Logger
	names names
	// now is the activity feed watch's clock for filefeed's limits
	// (time.Now when nil; tests set it before the first watch).
	now func() time.Time

	// mu guards watchers and closed.
	mu       sync.Mutex
	watchers map[string]*pollWatcher
	closed   bool
}

var _ filesystempbconnect.FilesystemHandler = (*Service)(nil)

// New returns the Filesystem service. Call Close on shutdown to stop polling
// watchers.
func New(st *state.State, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{st: st, log: log.With("service", "filesystem"), names: names{meta: DefaultMetadataStore()},
		watchers: map[string]*pollWatcher{}}
}

// Close stops every polling watcher.
func (s *Service) Close() error {
	s.mu.Lock()
	ws := s.watchers
	s.watchers = map[string]*pollWatcher{}
	s.closed = true
	s.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
	return nil
}

// userFor resolves the acting user from the Basic `Authorization` header,
// falling back to the agent's default user.
func (s *Service) userFor(h interface{ Get(string) string }) (*identity.User, error) {
	name, err := identity.UsernameFromBasic(h.Get("Authorization"))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid username: %w", err))
	}
	if name == "" {
		name = s.st.DefaultUser()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		if errors.Is(err, identity.ErrUnknownUser) {
			return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid username: '%s'", name))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("looking up user %q: %w", name, err))
	}
	return u, nil
}

func (s *Service) resolve(u *identity.User, p string) string {
	return identity.ResolvePath(p, u.Home, s.st.DefaultWorkdir())
}

// fsError converts a filesystem error into a Connect error with the right
// code; what describes the operation for the message.
func (s *Service) fsError(what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission):
		code = connect.CodePermissionDenied
	case errors.Is(err, fs.ErrExist):
		code = connect.CodeAlreadyExists
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTEMPTY):
		code = connect.CodeInvalidArgument
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = connect.CodeResourceExhausted
	case errors.Is(err, syscall.EROFS):
		code = connect.CodeFailedPrecondition
	}
	if code == connect.CodeInternal {
		s.log.Error("filesystem operation failed", "op", what, "err", err)
	}
	return connect.NewError(code, fmt.Errorf("%s: %w", what, err))
}

func userErr(code connect.Code, format string, args ...any) error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}

// Stat describes one path (not following a final symlink for the lookup;
// the entry reports the target's type).
func (s *Service) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	u, err := s.userFor(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	var entry *filesystempb.EntryInfo
	err = identity.RunAs(u, func() error {
		fi, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return userErr(connect.CodeNotFound, "path '%s' does not exist", p)
			}
			return err
		}
		entry = s.names.entryInfo(p, fi)
		return nil
	})
	if err != nil {
		return nil, s.fsError("stat "+p, err)
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: entry}), nil
}

// MakeDir creates a directory and its parents (0755, owned by the user).
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	u, err := s.userFor(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	var entry *filesystempb.EntryInfo
	err = identity.RunAs(u, func() error {
		if fi, err := os.Stat(p); err == nil {
			if fi.IsDir() {
				return userErr(connect.CodeAlreadyExists, "directory '%s' already exists", p)
			}
			return userErr(connect.CodeInvalidArgument, "path '%s' already exists and is not a directory", p)
		}
		if err := MkdirAllMode(p, 0o755); err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		entry = s.names.entryInfo(p, fi)
		return nil
	})
	if err != nil {
		return nil, s.fsError("creating directory "+p, err)
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: entry}), nil
}

// MkdirAllMode is os.MkdirAll that also forces mode on every directory it
// creates (independent of the umask). Existing directories are untouched.
func MkdirAllMode(p string, mode fs.FileMode) error {
	fi, err := os.Stat(p)
	if err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(p); parent != p {
		if err := MkdirAllMode(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(p, mode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
				return nil // raced with another creator
			}
		}
		return err
	}
	return os.Chmod(p, mode)
}

// Move renames source to destination, creating the destination's parents.
func (s *Service) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	u, err := s.userFor(req.Header())
	if err != nil {
		return nil, err
	}
	src := s.resolve(u, req.Msg.GetSource())
	dst := s.resolve(u, req.Msg.GetDestination())
	var entry *filesystempb.EntryInfo
	err = identity.RunAs(u, func() error {
		if _, err := os.Lstat(src); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return userErr(connect.CodeNotFound, "source '%s' does not exist", src)
			}
			return err
		}
		if err := MkdirAllMode(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
		fi, err := os.Lstat(dst)
		if err != nil {
			return err
		}
		entry = s.names.entryInfo(dst, fi)
		return nil
	})
	if err != nil {
		return nil, s.fsError(fmt.Sprintf("moving %s to %s", src, dst), err)
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: entry}), nil
}

// ListDir lists a directory to the requested depth (0 means 1). Children are
// reported under the requested path even when it is a symlink; symlinked
// subdirectories are not descended into.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	u, err := s.userFor(req.Header())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	p := s.resolve(u, req.Msg.GetPath())
	var entries []*filesystempb.EntryInfo
	err = identity.RunAs(u, func() error {
		fi, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return userErr(connect.CodeNotFound, "path '%s' does not exist", p)
			}
			return err
		}
		if !fi.IsDir() {
			return userErr(connect.CodeInvalidArgument, "path '%s' is not a directory", p)
		}
		// The top directory must be readable; unreadable subdirectories are skipped.
		des, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		entries = s.walk(ctx, p, des, depth)
		return ctx.Err()
	})
	if err != nil {
		return nil, s.fsError("listing "+p, err)
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: entries}), nil
}

func (s *Service) walk(ctx context.Context, dir string, des []os.DirEntry, depth int) []*filesystempb.EntryInfo {
	var out []*filesystempb.EntryInfo
	for _, de := range des {
		if ctx.Err() != nil {
			return out
		}
		child := filepath.Join(dir, de.Name())
		fi, err := os.Lstat(child)
		if err != nil {
			continue // vanished meanwhile
		}
		out = append(out, s.names.entryInfo(child, fi))
		if depth > 1 && fi.IsDir() {
			sub, err := os.ReadDir(child)
			if err != nil {
				s.log.Debug("skipping unreadable directory", "path", child, "err", err)
				continue
			}
			out = append(out, s.walk(ctx, child, sub, depth-1)...)
		}
	}
	return out
}

// Remove deletes a path recursively; a missing path is not an error.
func (s *Service) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	u, err := s.userFor(req.Header())
	if err != nil {
		return nil, err
	}
	p := s.resolve(u, req.Msg.GetPath())
	err = identity.RunAs(u, func() error { return os.RemoveAll(p) })
	if err != nil {
		return nil, s.fsError("removing "+p, err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// Package identity resolves which Unix user a request acts as (Basic auth
// "user:" header or the username query parameter) and resolves request paths
// the way E2B's envd does (spec §3.2).
package identity

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrUnknownUser is returned for a username that does not exist.
var ErrUnknownUser = errors.New("invalid username")

// User is a resolved Unix account.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups
	Home   string
}

// The account files Lookup reads (the agent is built without cgo, so
// os/user parses these two files).
var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// cache holds resolved users while the account files stay unchanged. Every
// command and file request resolves its user, and parsing both files costs
// about 1 ms under gVisor (each open and read is a round trip to the
// Sentry); two stats cost a tenth of that.
var cache = struct {
	mu    sync.Mutex
	users map[string]cachedUser
}{users: map[string]cachedUser{}}

type cachedUser struct {
	u             User
	passwd, group os.FileInfo
}

// sameStamp reports whether b is a's file with the same size and times.
func sameStamp(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return false
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && changeTime(a) == changeTime(b)
}

// Lookup resolves a username. Results are reused while /etc/passwd and
// /etc/group keep their inode, size and times (a useradd, usermod or an edit
// changes them); the caller gets its own copy.
func Lookup(name string) (*User, error) {
	pfi, _ := os.Stat(passwdFile)
	gfi, _ := os.Stat(groupFile)
	cache.mu.Lock()
	c, ok := cache.users[name]
	cache.mu.Unlock()
	if ok && sameStamp(c.passwd, pfi) && sameStamp(c.group, gfi) {
		u := c.u
		u.Groups = slices.Clone(c.u.Groups)
		return &u, nil
	}
	u, err := lookupFiles(name)
	if err != nil {
		return nil, err
	}
	if pfi != nil && gfi != nil {
		cache.mu.Lock()
		if len(cache.users) >= maxCachedUsers {
			clear(cache.users)
		}
		cache.users[name] = cachedUser{u: *u, passwd: pfi, group: gfi}
		cache.mu.Unlock()
	}
	out := *u
	out.Groups = slices.Clone(u.Groups)
	return &out, nil
}

// maxCachedUsers bounds the cache (names come from requests).
const maxCachedUsers = 64

// lookupFiles resolves a user without the cache (a variable for tests).
var lookupFiles = lookup

func lookup(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownUser, name)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing uid of %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing gid of %q: %w", name, err)
	}
	out := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				out.Groups = append(out.Groups, uint32(n))
			}
		}
	}
	if out.Home == "" {
		out.Home = "/"
	}
	return out, nil
}

// UsernameFromBasic extracts the username from an `Authorization: Basic
// base64("<user>:")` header value. It returns "" when the header is absent.
func UsernameFromBasic(header string) (string, error) {
	if header == "" {
		return "", nil
	}
	const prefix = "Basic "
	if len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", fmt.Errorf("unsupported authorization scheme")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header[len(prefix):]))
	if err != nil {
		return "", fmt.Errorf("invalid basic authorization: %w", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

// ResolvePath applies E2B's rules: empty path → workdir if set, else home;
// "~" and "~/x" → home; other relative paths are joined to home; the result
// is absolute and cleaned.
func ResolvePath(p, home, workdir string) string {
	switch {
	case p == "":
		if workdir != "" {
			return filepath.Clean(workdir)
		}
		return filepath.Clean(home)
	case p == "~":
		return filepath.Clean(home)
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	default:
		return filepath.Join(home, p)
	}
}

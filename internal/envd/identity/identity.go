// Package identity resolves which Unix user a request acts as (Basic auth
// "user:" header or the username query parameter) and resolves request paths
// the way E2B's envd does (spec §3.2).
package identity

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
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

// Lookup resolves a username.
func Lookup(name string) (*User, error) {
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

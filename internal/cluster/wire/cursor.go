package wire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cursor is a decoded pagination token of GET /v2/sandboxes: the position
// of the last item of the previous page. A node's API and the api tier
// (which merges the nodes' pages) encode and decode the same tokens.
type Cursor struct {
	StartedAt time.Time
	ID        string
	Asc       bool
}

// EncodeCursor builds the opaque nextToken:
// base64url("<RFC3339Nano startedAt>__<id>[__asc]").
func EncodeCursor(c Cursor) string {
	s := c.StartedAt.UTC().Format(time.RFC3339Nano) + "__" + c.ID
	if c.Asc {
		s += "__asc"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// DecodeCursor parses a nextToken produced by EncodeCursor (padding is
// optional).
func DecodeCursor(tok string) (Cursor, error) {
	data, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(tok, "="))
	if err != nil {
		return Cursor{}, fmt.Errorf("invalid nextToken: %w", err)
	}
	parts := strings.Split(string(data), "__")
	if len(parts) < 2 || len(parts) > 3 {
		return Cursor{}, errors.New("invalid nextToken: malformed")
	}
	ts, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return Cursor{}, fmt.Errorf("invalid nextToken time: %w", err)
	}
	if !IDChars(parts[1]) {
		return Cursor{}, errors.New("invalid nextToken: bad sandbox id")
	}
	c := Cursor{StartedAt: ts, ID: parts[1]}
	if len(parts) == 3 {
		if parts[2] != "asc" {
			return Cursor{}, errors.New("invalid nextToken: bad direction")
		}
		c.Asc = true
	}
	return c, nil
}

// List page sizes of GET /v2/sandboxes and GET /snapshots: the default and
// the largest `limit`.
const (
	DefaultListLimit = 100
	MaxListLimit     = 100
)

// EncodeSnapshotCursor builds GET /snapshots' opaque nextToken, the
// position of a page's last snapshot: base64url("<createdAt unix nanos>_<id>").
func EncodeSnapshotCursor(createdAt time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d_%s", createdAt.UnixNano(), id))
}

// DecodeSnapshotCursor parses a token produced by EncodeSnapshotCursor
// (padding is optional): the snapshot's creation time in unix nanoseconds,
// and its id.
func DecodeSnapshotCursor(tok string) (createdNs int64, id string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(tok, "="))
	if err != nil {
		return 0, "", fmt.Errorf("invalid nextToken: %w", err)
	}
	ns, id, ok := strings.Cut(string(b), "_")
	n, nerr := strconv.ParseInt(ns, 10, 64)
	if !ok || nerr != nil || id == "" {
		return 0, "", errors.New("invalid nextToken: malformed")
	}
	return n, id, nil
}

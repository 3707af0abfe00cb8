package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

var (
	// ErrNotFound: no object under the key.
	ErrNotFound = errors.New("artifact not found")
	// ErrDigestMismatch: the bytes do not hash to the digest they were
	// given or stored with.
	ErrDigestMismatch = errors.New("artifact digest mismatch")
	// ErrUnavailable: the backend could not be reached or failed on its
	// side (network error, timeout, 5xx). Returned wrapped in an
	// *UnavailableError.
	ErrUnavailable = errors.New("artifact store unavailable")
	// ErrInvalidKey: a key that is not a relative slash path of
	// [A-Za-z0-9._-] segments (see ValidKey).
	ErrInvalidKey = errors.New("invalid artifact key")
)

// UnavailableError reports a backend that could not be reached. It matches
// both ErrUnavailable and its cause with errors.Is.
type UnavailableError struct {
	Store string // the backend, as String() shows it
	Op    string // put, get, stat, delete, list, check
	Key   string
	Err   error
}

func (e *UnavailableError) Error() string {
	k := ""
	if e.Key != "" {
		k = " " + e.Key
	}
	return fmt.Sprintf("artifact store %s unreachable (%s%s): %v", e.Store, e.Op, k, e.Err)
}

// Unwrap returns ErrUnavailable and the cause.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// Digest is a content digest, "sha256:<64 lowercase hex digits>".
type Digest string

const digestPrefix = "sha256:"

// ParseDigest checks the form of s.
func ParseDigest(s string) (Digest, error) {
	d := Digest(s)
	if err := d.Validate(); err != nil {
		return "", err
	}
	return d, nil
}

// Validate reports whether d is "sha256:" and 64 lowercase hex digits.
func (d Digest) Validate() error {
	h, ok := strings.CutPrefix(string(d), digestPrefix)
	if !ok || !isHex64(h) {
		return fmt.Errorf("invalid digest %q: want sha256:<64 lowercase hex digits>", string(d))
	}
	return nil
}

// Hex is the digest's hex part.
func (d Digest) Hex() string { return strings.TrimPrefix(string(d), digestPrefix) }

func (d Digest) String() string { return string(d) }

// DigestOf hashes b.
func DigestOf(b []byte) Digest {
	s := sha256.Sum256(b)
	return Digest(digestPrefix + hex.EncodeToString(s[:]))
}

// digestOf is the digest of what was written to h, a SHA-256 hash.
func digestOf(h interface{ Sum([]byte) []byte }) Digest {
	return Digest(digestPrefix + hex.EncodeToString(h.Sum(nil)))
}

// DigestReader hashes everything read from r.
func DigestReader(r io.Reader) (Digest, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return digestOf(h), n, nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Content-addressed key prefixes.
const (
	blobPrefix = "blobs/sha256/"
	treePrefix = "trees/sha256/"
)

// BlobKey is the content-addressed key of a file with digest d.
func BlobKey(d Digest) string { return blobPrefix + d.Hex() }

// TreeKey is the content-addressed key of a directory whose packed form
// (tar+zstd, see internal/artifacts/tree) has digest d.
func TreeKey(d Digest) string { return treePrefix + d.Hex() }

// KeyDigest returns the digest a content-addressed key names.
func KeyDigest(key string) (Digest, bool) {
	for _, p := range []string{blobPrefix, treePrefix} {
		if h, ok := strings.CutPrefix(key, p); ok && isHex64(h) {
			return Digest(digestPrefix + h), true
		}
	}
	return "", false
}

// maxKeyLen keeps keys well inside S3's 1024-byte limit once a prefix is
// added.
const maxKeyLen = 512

// ValidKey checks a key: a relative slash path of non-empty segments of
// [A-Za-z0-9._-], none "." or "..", none starting with "." (reserved for
// the backends' own files), at most 512 bytes.
func ValidKey(key string) error {
	if key == "" || len(key) > maxKeyLen {
		return fmt.Errorf("%w %q: empty or longer than %d bytes", ErrInvalidKey, key, maxKeyLen)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg[0] == '.' {
			return fmt.Errorf("%w %q: empty segment or one starting with '.'", ErrInvalidKey, key)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return fmt.Errorf("%w %q: character %q", ErrInvalidKey, key, c)
			}
		}
	}
	return nil
}

// validPrefix checks a List prefix: "" or a key, optionally ending in "/".
func validPrefix(prefix string) error {
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		return ValidKey(p)
	}
	return nil
}

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64
	Digest   Digest
	Modified time.Time
}

// Backend is where objects live. Keys are checked by the Store before they
// reach a backend. Put reads r to its end and stores the bytes only when
// they hash to want; otherwise it returns ErrDigestMismatch and nothing is
// stored under key (an object already there stays). size is the length of r
// when known, else -1. Delete of a missing key is not an error. List
// returns the objects whose keys start with prefix, sorted by key.
type Backend interface {
	Put(ctx context.Context, key string, r io.Reader, size int64, want Digest) (Info, error)
	Open(ctx context.Context, key string) (io.ReadCloser, Info, error)
	Stat(ctx context.Context, key string) (Info, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]Info, error)
	// Check proves the backend usable: reachable, and an object can be
	// written and removed.
	Check(ctx context.Context) error
	// String names the backend for logs and errors (no credentials).
	String() string
}

// verifyReader passes r through while hashing it, and reports a digest
// mismatch instead of the end of the data: the last bytes are withheld, so
// a consumer that stores what it reads never sees a complete, wrong object.
type verifyReader struct {
	r    io.Reader
	h    interface{ Sum([]byte) []byte }
	w    io.Writer
	want Digest
	size int64 // expected length, -1 unknown
	n    int64
	err  error
}

func newVerifyReader(r io.Reader, size int64, want Digest) *verifyReader {
	h := sha256.New()
	return &verifyReader{r: r, h: h, w: h, want: want, size: size}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.w.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		v.err = fmt.Errorf("%w: more than the %d bytes announced", ErrDigestMismatch, v.size)
		return 0, v.err
	}
	if err == io.EOF || (v.size >= 0 && v.n == v.size && err == nil && n > 0) {
		if v.size >= 0 && v.n != v.size {
			v.err = fmt.Errorf("%w: %d bytes, %d announced", ErrDigestMismatch, v.n, v.size)
			return 0, v.err
		}
		if got := v.sum(); got != v.want {
			v.err = fmt.Errorf("%w: the data hashes to %s, %s was given", ErrDigestMismatch, got, v.want)
			return 0, v.err
		}
	}
	return n, err
}

func (v *verifyReader) sum() Digest {
	return digestOf(v.h)
}

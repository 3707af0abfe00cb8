package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config says where an S3 backend is and how to reach it.
type S3Config struct {
	// Endpoint is host[:port] or a URL (http:// or https://). Empty: AWS
	// S3 (s3.amazonaws.com).
	Endpoint  string
	Bucket    string
	Prefix    string // key prefix inside the bucket, "" or ending without "/"
	Region    string
	AccessKey string
	SecretKey string
	// PartSize of multipart uploads (default 16 MiB; at least 5 MiB). An
	// object up to PartSize is sent in one PUT, after its digest is checked.
	PartSize int64
	// MaxRetries of a request (default 3; the client's default of 10 makes
	// an unreachable store take tens of seconds to report).
	MaxRetries int
}

const (
	defaultPartSize = 16 << 20
	minPartSize     = 5 << 20
	maxParts        = 10000
	metaSHA256      = "Sha256" // x-amz-meta-sha256
)

// S3 is a backend in an S3-compatible object store (github.com/minio/minio-go/v7).
// An object is <prefix>/<key> in the bucket, with its digest in the user
// metadata x-amz-meta-sha256.
type S3 struct {
	cfg    S3Config
	client *minio.Client
	name   string
}

var _ Backend = (*S3)(nil)

// NewS3 makes an S3 backend. It does not contact the store (see Check).
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("artifacts: S3 bucket is empty")
	}
	cfg.Prefix = strings.Trim(cfg.Prefix, "/")
	if cfg.Prefix != "" {
		if err := ValidKey(cfg.Prefix); err != nil {
			return nil, fmt.Errorf("artifacts: S3 prefix: %w", err)
		}
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = defaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("artifacts: S3 part size %d is below S3's minimum of 5 MiB", cfg.PartSize)
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 3
	}
	host, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		var err error
		if host, secure, err = parseEndpoint(cfg.Endpoint); err != nil {
			return nil, fmt.Errorf("artifacts: S3 %w", err)
		}
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
	}
	client, err := minio.New(host, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     secure,
		Region:     cfg.Region,
		Transport:  tr,
		MaxRetries: cfg.MaxRetries,
		// Send a CRC32C of each unsigned body in an HTTP trailer, which
		// the server checks; without this minio-go sends none and an
		// unsigned upload (DisableContentSha256) has no in-transit check.
		TrailingHeaders: true,
	})
	if err != nil {
		return nil, fmt.Errorf("artifacts: S3 client for %s: %w", host, err)
	}
	name := "s3://" + cfg.Bucket
	if cfg.Prefix != "" {
		name += "/" + cfg.Prefix
	}
	if cfg.Endpoint != "" {
		name += " at " + host
	}
	return &S3{cfg: cfg, client: client, name: name}, nil
}

// parseEndpoint checks an S3 endpoint, host[:port] (HTTPS) or
// http(s)://host[:port], and returns its host and whether it is HTTPS.
func parseEndpoint(e string) (host string, secure bool, err error) {
	bad := fmt.Errorf("endpoint %q: want host[:port] or http(s)://host[:port]", e)
	if !strings.Contains(e, "://") {
		if e == "" || strings.ContainsAny(e, "/?#@ ") {
			return "", false, bad
		}
		return e, true, nil
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", false, bad
	}
	return u.Host, u.Scheme == "https", nil
}

func (s *S3) String() string { return s.name }

func (s *S3) object(key string) string {
	if s.cfg.Prefix == "" {
		return key
	}
	return s.cfg.Prefix + "/" + key
}

// classify wraps err: an *UnavailableError for network failures, timeouts
// and server errors, ErrNotFound for a missing object.
func (s *S3) classify(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrDigestMismatch) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("artifact store %s: %s %s: %w", s, op, key, ctx.Err())
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket:
		return fmt.Errorf("%w: %s in %s", ErrNotFound, key, s)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return &UnavailableError{Store: s.String(), Op: op, Key: key, Err: err}
	case resp.StatusCode != 0:
		return fmt.Errorf("artifact store %s: %s %s: %w", s, op, key, err)
	}
	if isNetworkError(err) {
		return &UnavailableError{Store: s.String(), Op: op, Key: key, Err: err}
	}
	return fmt.Errorf("artifact store %s: %s %s: %w", s, op, key, err)
}

func isNetworkError(err error) bool {
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.As(err, &oe) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, want Digest) (Info, error) {
	opts := minio.PutObjectOptions{
		UserMetadata: map[string]string{metaSHA256: want.Hex()},
		ContentType:  "application/octet-stream",
		PartSize:     uint64(s.cfg.PartSize),
		// No SigV4 payload hash (over plain HTTP the client would sign
		// every 64 KiB chunk: half the upload rate on loopback). The
		// body still carries a CRC32C checksum in a trailer the server
		// checks (TrailingHeaders in NewS3), and the SHA-256 in the
		// signed metadata is checked end to end by every Get.
		DisableContentSha256: true,
		// Asked for explicitly: minio-go v7.4.1's automatic CRC32C
		// (TrailingHeaders) covers the parts of a multipart upload but
		// not a single PUT, whose trailer it drops again.
		Checksum: minio.ChecksumCRC32C,
	}
	vr := newVerifyReader(r, size, want)
	var err error
	if size >= 0 && size <= s.cfg.PartSize {
		// One PUT, sent only once the whole body has been read and
		// verified.
		var buf bytes.Buffer
		buf.Grow(int(size))
		if _, err = io.Copy(&buf, vr); err != nil {
			return Info{}, s.classify(ctx, "put", key, err)
		}
		_, err = s.client.PutObject(ctx, s.cfg.Bucket, s.object(key), bytes.NewReader(buf.Bytes()), int64(buf.Len()), opts)
	} else {
		// Multipart, one part in flight: the client reads a part, uploads
		// it, reads the next. The verifier fails the read that would end
		// the stream on a mismatch, so the client aborts the upload
		// instead of completing it, and no part upload is in flight at
		// that moment: with several in flight, a part could land after
		// the abort and leave an unfinished upload behind (seen with
		// versitygw; AWS documents the same for its abort).
		if size > 0 {
			if ps := (size + maxParts - 1) / maxParts; ps > s.cfg.PartSize {
				opts.PartSize = uint64((ps + 1<<20 - 1) &^ (1<<20 - 1))
			}
		}
		_, err = s.client.PutObject(ctx, s.cfg.Bucket, s.object(key), vr, -1, opts)
	}
	if err != nil {
		return Info{}, s.classify(ctx, "put", key, err)
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return Info{}, err
	}
	if info.Digest != want || (size >= 0 && info.Size != size) {
		return Info{}, fmt.Errorf("artifact store %s: %s stored as %s (%d bytes), want %s", s, key, info.Digest, info.Size, want)
	}
	return info, nil
}

func (s *S3) info(key string, oi minio.ObjectInfo) (Info, error) {
	var hexd string
	for k, v := range oi.UserMetadata {
		if strings.EqualFold(k, metaSHA256) || strings.EqualFold(k, "X-Amz-Meta-"+metaSHA256) {
			hexd = v
		}
	}
	d, err := ParseDigest(digestPrefix + hexd)
	if err != nil {
		return Info{}, fmt.Errorf("artifact store %s: %s has no valid x-amz-meta-sha256 (%q)", s, key, hexd)
	}
	return Info{Key: key, Size: oi.Size, Digest: d, Modified: oi.LastModified}, nil
}

func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, s.object(key), minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.classify(ctx, "stat", key, err)
	}
	return s.info(key, oi)
}

func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, s.object(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, Info{}, s.classify(ctx, "get", key, err)
	}
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, Info{}, s.classify(ctx, "get", key, err)
	}
	info, err := s.info(key, oi)
	if err != nil {
		obj.Close()
		return nil, Info{}, err
	}
	return &s3Reader{obj: obj, s: s, ctx: ctx, key: key}, info, nil
}

// s3Reader classifies errors in the middle of a download.
type s3Reader struct {
	obj *minio.Object
	s   *S3
	ctx context.Context
	key string
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.classify(r.ctx, "get", r.key, err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.obj.Close() }

func (s *S3) Delete(ctx context.Context, key string) error {
	err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.object(key), minio.RemoveObjectOptions{})
	if err := s.classify(ctx, "delete", key, err); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	full := s.object(prefix)
	if prefix == "" && s.cfg.Prefix != "" {
		full = s.cfg.Prefix + "/"
	}
	var out []Info
	strip := ""
	if s.cfg.Prefix != "" {
		strip = s.cfg.Prefix + "/"
	}
	for oi := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if oi.Err != nil {
			return nil, s.classify(ctx, "list", prefix, oi.Err)
		}
		key := strings.TrimPrefix(oi.Key, strip)
		if ValidKey(key) != nil { // not one of ours
			continue
		}
		info := Info{Key: key, Size: oi.Size, Modified: oi.LastModified}
		if d, ok := KeyDigest(key); ok {
			info.Digest = d
		} else {
			// Listings carry no user metadata.
			st, err := s.Stat(ctx, key)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			info = st
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *S3) Check(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.classify(ctx, "check", "", err)
	}
	if !ok {
		return fmt.Errorf("artifact store %s: bucket %q does not exist", s, s.cfg.Bucket)
	}
	return checkRoundTrip(ctx, s)
}

package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/airlock-sandbox/airlock/internal/hostaddr"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
)

// Bucket volumes (an Airlock extension): a volume whose files are the
// objects under a prefix of an S3-compatible bucket. The node mounts the
// bucket on the host with s3fs (Buckets, bucketmount_linux.go) and the
// runtimes mount that directory into sandboxes like any volume's; the
// credentials stay on the host (sealed in the store, in a 0600 passwd
// file for s3fs), never in a sandbox.

// Bucket is a bucket volume's settings, as the create body gives them.
type Bucket struct {
	// Endpoint is http(s)://host[:port].
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	// Prefix is "" (the whole bucket) or "dir/…/" (Normalize).
	Prefix          string `json:"prefix,omitempty"`
	Region          string `json:"region,omitempty"`
	AccessKeyID     string `json:"accessKeyId,omitempty"`
	SecretAccessKey string `json:"secretAccessKey,omitempty"`
	// PathStyle addresses the bucket as endpoint/bucket rather than
	// bucket.endpoint.
	PathStyle bool `json:"pathStyle,omitempty"`
	// ReadOnly mounts it read-only, in s3fs and in the sandbox.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// DefaultBucketRegion is a bucket's region when the create names none.
const DefaultBucketRegion = "us-east-1"

var (
	bucketNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$`)
	// prefixSegRE is one segment of a prefix: what s3fs takes as a path
	// and an -o option value can carry (no comma, no colon).
	prefixSegRE = regexp.MustCompile(`^[A-Za-z0-9._ =@+-]{1,255}$`)
	regionRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	// keyRE: printable ASCII without space and ':' (s3fs's passwd file is
	// bucket:key:secret lines).
	keyRE = regexp.MustCompile(`^[\x21-\x39\x3b-\x7e]{1,256}$`)
)

// Normalize checks b's shape and fills its defaults (region, the prefix
// as "a/b/"). Its error is the user's (a 400), naming the field.
func (b *Bucket) Normalize() error {
	u, err := url.Parse(b.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.Contains(u.Host, ",") {
		return errors.New("bucket.endpoint: want http(s)://host[:port]")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("bucket.endpoint: invalid port")
		}
	}
	b.Endpoint = u.Scheme + "://" + u.Host
	if _, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		b.PathStyle = true // no virtual host on an address
	}
	if !bucketNameRE.MatchString(b.Bucket) || strings.Contains(b.Bucket, "..") {
		return errors.New("bucket.bucket: want a bucket name (3 to 63 letters, digits, '.', '-', '_')")
	}
	if p := strings.Trim(b.Prefix, "/"); p != "" {
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." || !prefixSegRE.MatchString(seg) {
				return fmt.Errorf("bucket.prefix %q: want segments of letters, digits and ._=@+- separated by single '/', without '.' or '..'", b.Prefix)
			}
		}
		b.Prefix = p + "/"
	} else {
		b.Prefix = ""
	}
	if b.Region == "" {
		b.Region = DefaultBucketRegion
	}
	if !regionRE.MatchString(b.Region) {
		return errors.New("bucket.region: want a region name (e.g. us-east-1)")
	}
	if !keyRE.MatchString(b.AccessKeyID) {
		return errors.New("bucket.accessKeyId: required, printable characters without ':' or spaces")
	}
	if !keyRE.MatchString(b.SecretAccessKey) {
		return errors.New("bucket.secretAccessKey: required, printable characters without ':' or spaces")
	}
	return nil
}

// Public is b as API answers show it: without the secret, and the access
// key id masked to its last 4 characters.
func (b *Bucket) Public() *Bucket {
	p := *b
	p.SecretAccessKey = ""
	p.AccessKeyID = MaskKey(b.AccessKeyID)
	return &p
}

// MaskKey is key with all but its last 4 characters replaced by '*' (all
// of a key of 8 characters or fewer).
func MaskKey(key string) string {
	if len(key) <= 8 {
		return strings.Repeat("*", len(key))
	}
	return strings.Repeat("*", len(key)-4) + key[len(key)-4:]
}

// bucketRecord is what the store keeps (store.Volume.Bucket): the
// settings in the clear, the credentials sealed.
type bucketRecord struct {
	Bucket
	// AccessKeyHint is MaskKey(access key id), for answers that do not
	// open the sealed part.
	AccessKeyHint string `json:"accessKeyHint"`
	// Sealed is the JSON of {accessKeyId, secretAccessKey}, sealed with
	// bucketAD(volume id).
	Sealed []byte `json:"sealed"`
}

type bucketCreds struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
}

func bucketAD(volumeID string) []byte {
	return []byte("airlock volume bucket credentials v1\x00" + volumeID)
}

// EncodeBucket is b as store.Volume.Bucket keeps it for volume id, its
// credentials sealed with box.
func EncodeBucket(box *secretbox.Box, volumeID string, b *Bucket) (string, error) {
	creds, err := json.Marshal(bucketCreds{b.AccessKeyID, b.SecretAccessKey})
	if err != nil {
		return "", err
	}
	sealed, err := box.Seal(creds, bucketAD(volumeID))
	if err != nil {
		return "", fmt.Errorf("sealing volume %s's credentials: %w", volumeID, err)
	}
	rec := bucketRecord{Bucket: *b, AccessKeyHint: MaskKey(b.AccessKeyID), Sealed: sealed}
	rec.AccessKeyID, rec.SecretAccessKey = "", ""
	raw, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	return string(raw), nil
}

// PublicBucket is the bucket of a stored record (store.Volume.Bucket) as
// API answers show it (Bucket.Public), without opening the credentials;
// nil for "" (not a bucket volume) or a record it cannot read.
func PublicBucket(stored string) *Bucket {
	if stored == "" {
		return nil
	}
	var rec bucketRecord
	if err := json.Unmarshal([]byte(stored), &rec); err != nil {
		return nil
	}
	b := rec.Bucket
	b.AccessKeyID, b.SecretAccessKey = rec.AccessKeyHint, ""
	return &b
}

// BucketReadOnly reports whether a stored record is a read-only bucket.
func BucketReadOnly(stored string) bool {
	b := PublicBucket(stored)
	return b != nil && b.ReadOnly
}

// DecodeBucket opens a stored record of volume id (EncodeBucket), with its
// credentials.
func DecodeBucket(box *secretbox.Box, volumeID, stored string) (*Bucket, error) {
	var rec bucketRecord
	if err := json.Unmarshal([]byte(stored), &rec); err != nil {
		return nil, fmt.Errorf("volume %s: reading its bucket record: %w", volumeID, err)
	}
	if box == nil {
		return nil, fmt.Errorf("volume %s: a bucket volume, and this daemon has no secrets key", volumeID)
	}
	raw, err := box.Open(rec.Sealed, bucketAD(volumeID))
	if err != nil {
		return nil, fmt.Errorf("volume %s: opening its bucket credentials (was --secrets-key-file changed?): %w", volumeID, err)
	}
	var c bucketCreds
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("volume %s: reading its bucket credentials: %w", volumeID, err)
	}
	b := rec.Bucket
	b.AccessKeyID, b.SecretAccessKey = c.AccessKeyID, c.SecretAccessKey
	return &b, nil
}

// BucketError is a bucket that a check refused: the user's error (a 400),
// in the store's words where it answered.
type BucketError struct{ Msg string }

func (e *BucketError) Error() string { return e.Msg }

// DefaultBucketCheckTimeout bounds CheckBucket.
const DefaultBucketCheckTimeout = 10 * time.Second

// BucketDialer opens connections to bucket endpoints: a host resolved
// once, each address checked, and one that is loopback, private,
// link-local, unspecified, multicast or the host's own refused unless
// AllowPrivate (an operator's --volume-bucket-allow-private), so a bucket
// endpoint cannot reach into the operator's network.
type BucketDialer struct {
	AllowPrivate bool
	Dialer       net.Dialer
	// HostAddrs lists the host's own addresses (nil: net.InterfaceAddrs).
	HostAddrs func() ([]net.Addr, error)
}

// Denied reports why a must not be dialed, or "".
func (d *BucketDialer) Denied(a netip.Addr) string {
	if d.AllowPrivate {
		return ""
	}
	if why := hostaddr.Special(a); why != "" {
		return why
	}
	if why := hostaddr.Private(a); why != "" {
		return why
	}
	if hostaddr.Own(a, d.HostAddrs) {
		return fmt.Sprintf("%s is an address of this host", a.Unmap())
	}
	return ""
}

// Resolve returns host's addresses, refusing any Denied one.
func (d *BucketDialer) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	var ips []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ips = []netip.Addr{a}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, &BucketError{Msg: fmt.Sprintf("bucket endpoint %s: %v", host, err)}
	}
	for _, ip := range ips {
		if why := d.Denied(ip); why != "" {
			return nil, &BucketError{Msg: fmt.Sprintf("bucket endpoint %s refused: %s (an operator can allow private endpoints with --volume-bucket-allow-private)", host, why)}
		}
	}
	if len(ips) == 0 {
		return nil, &BucketError{Msg: fmt.Sprintf("bucket endpoint %s: no address", host)}
	}
	return ips, nil
}

// DialContext connects to one of addr's checked addresses, never
// resolving again.
func (d *BucketDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := d.Resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var first error
	for _, ip := range ips {
		c, err := d.Dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// CheckBucket lists at most one object under b's prefix with b's
// credentials (ListObjectsV2), through d, within timeout (0:
// DefaultBucketCheckTimeout). A refusal is a *BucketError in the store's
// words (wrong credentials, no such bucket) or naming why the endpoint
// could not be reached.
func CheckBucket(ctx context.Context, b *Bucket, d *BucketDialer, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultBucketCheckTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, err := url.Parse(b.Endpoint)
	if err != nil {
		return &BucketError{Msg: "bucket.endpoint: " + err.Error()}
	}
	if d.Dialer.Timeout == 0 {
		d.Dialer.Timeout = timeout
	}
	tr := &http.Transport{
		Proxy:                 nil, // every connection goes through the checked dialer
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   1,
		DisableKeepAlives:     true,
	}
	defer tr.CloseIdleConnections()
	lookup := minio.BucketLookupDNS
	if b.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(b.AccessKeyID, b.SecretAccessKey, ""),
		Secure:       u.Scheme == "https",
		Region:       b.Region,
		Transport:    tr,
		BucketLookup: lookup,
		MaxRetries:   1,
	})
	if err != nil {
		return &BucketError{Msg: fmt.Sprintf("bucket.endpoint %s: %v", b.Endpoint, err)}
	}
	objs := client.ListObjects(ctx, b.Bucket, minio.ListObjectsOptions{Prefix: b.Prefix, MaxKeys: 1})
	obj, ok := <-objs // the first page's first key, or its error
	cancel()
	for range objs { // the lister ends on the cancel
	}
	if ok && obj.Err != nil {
		return bucketCheckError(b, obj.Err)
	}
	return nil
}

func bucketCheckError(b *Bucket, err error) error {
	var be *BucketError
	if errors.As(err, &be) {
		return be
	}
	where := fmt.Sprintf("bucket %s at %s", b.Bucket, b.Endpoint)
	if r := minio.ToErrorResponse(err); r.Code != "" || r.StatusCode != 0 {
		msg := r.Message
		if msg == "" {
			msg = http.StatusText(r.StatusCode)
		}
		if r.Code != "" {
			return &BucketError{Msg: fmt.Sprintf("%s refused the credentials or the bucket: %s: %s", where, r.Code, msg)}
		}
		return &BucketError{Msg: fmt.Sprintf("%s: %s", where, msg)}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &BucketError{Msg: fmt.Sprintf("%s did not answer in time", where)}
	}
	// A network error: say what, without the request's URL twice.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &BucketError{Msg: fmt.Sprintf("%s is unreachable: %v", where, err)}
}

package volume

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/secretbox"
)

func goodBucket() *Bucket {
	return &Bucket{Endpoint: "https://s3.example.com", Bucket: "my-bucket", AccessKeyID: "AKIAEXAMPLE1234", SecretAccessKey: "s3cr3t/Key+value"}
}

func TestBucketNormalize(t *testing.T) {
	b := goodBucket()
	b.Endpoint = "http://minio.example.com:9000/"
	b.Prefix = "/team/data"
	if err := b.Normalize(); err != nil {
		t.Fatal(err)
	}
	if b.Endpoint != "http://minio.example.com:9000" || b.Prefix != "team/data/" || b.Region != DefaultBucketRegion || b.PathStyle {
		t.Fatalf("normalized = %+v", b)
	}
	for _, tc := range []struct {
		name string
		edit func(*Bucket)
		want string
	}{
		{"no scheme", func(b *Bucket) { b.Endpoint = "s3.example.com" }, "bucket.endpoint"},
		{"ftp", func(b *Bucket) { b.Endpoint = "ftp://s3.example.com" }, "bucket.endpoint"},
		{"path", func(b *Bucket) { b.Endpoint = "https://s3.example.com/x" }, "bucket.endpoint"},
		{"user", func(b *Bucket) { b.Endpoint = "https://u:p@s3.example.com" }, "bucket.endpoint"},
		{"comma", func(b *Bucket) { b.Endpoint = "https://a,allow_root" }, "bucket.endpoint"},
		{"port", func(b *Bucket) { b.Endpoint = "https://s3.example.com:99999" }, "bucket.endpoint"},
		{"bucket", func(b *Bucket) { b.Bucket = "a" }, "bucket.bucket"},
		{"bucket comma", func(b *Bucket) { b.Bucket = "ab,allow_root" }, "bucket.bucket"},
		{"dotdot", func(b *Bucket) { b.Prefix = "a/../b" }, "bucket.prefix"},
		{"double slash", func(b *Bucket) { b.Prefix = "a//b" }, "bucket.prefix"},
		{"prefix comma", func(b *Bucket) { b.Prefix = "a,ro" }, "bucket.prefix"},
		{"region", func(b *Bucket) { b.Region = "US East" }, "bucket.region"},
		{"no key", func(b *Bucket) { b.AccessKeyID = "" }, "bucket.accessKeyId"},
		{"key colon", func(b *Bucket) { b.AccessKeyID = "a:b" }, "bucket.accessKeyId"},
		{"secret newline", func(b *Bucket) { b.SecretAccessKey = "a\nb" }, "bucket.secretAccessKey"},
	} {
		b := goodBucket()
		tc.edit(b)
		if err := b.Normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Normalize = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

func TestBucketRecord(t *testing.T) {
	box, err := secretbox.New(bytes.Repeat([]byte{1}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	b := goodBucket()
	b.ReadOnly = true
	if err := b.Normalize(); err != nil {
		t.Fatal(err)
	}
	rec, err := EncodeBucket(box, "vol-1", b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rec, b.SecretAccessKey) || strings.Contains(rec, b.AccessKeyID) {
		t.Fatalf("stored record holds a credential in the clear: %s", rec)
	}
	pub := PublicBucket(rec)
	if pub == nil || pub.SecretAccessKey != "" || pub.AccessKeyID != "***********1234" || pub.Bucket != "my-bucket" || !pub.ReadOnly {
		t.Fatalf("PublicBucket = %+v", pub)
	}
	if !BucketReadOnly(rec) || BucketReadOnly("") || PublicBucket("") != nil {
		t.Fatal("BucketReadOnly/PublicBucket of a plain volume")
	}
	got, err := DecodeBucket(box, "vol-1", rec)
	if err != nil || *got != *b {
		t.Fatalf("DecodeBucket = %+v, %v; want %+v", got, err, b)
	}
	// Sealed for one volume: another volume's record cannot borrow it.
	if _, err := DecodeBucket(box, "vol-2", rec); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("DecodeBucket for another volume: %v, want ErrOpen", err)
	}
	if p := b.Public(); p.SecretAccessKey != "" || p.AccessKeyID != "***********1234" {
		t.Fatalf("Public = %+v", p)
	}
}

func TestBucketDialerDenies(t *testing.T) {
	d := &BucketDialer{HostAddrs: func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("203.0.113.7"), Mask: net.CIDRMask(24, 32)}}, nil
	}}
	for _, a := range []string{"127.0.0.1", "::1", "10.1.2.3", "192.168.0.1", "172.16.5.5", "169.254.169.254", "fe80::1", "fd00::1", "0.0.0.0", "100.64.1.1", "203.0.113.7", "::ffff:127.0.0.1"} {
		if why := d.Denied(netip.MustParseAddr(a)); why == "" {
			t.Errorf("Denied(%s) = \"\", want a refusal", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "2606:4700::1111", "203.0.113.8"} {
		if why := d.Denied(netip.MustParseAddr(a)); why != "" {
			t.Errorf("Denied(%s) = %q", a, why)
		}
	}
	d.AllowPrivate = true
	if why := d.Denied(netip.MustParseAddr("127.0.0.1")); why != "" {
		t.Errorf("AllowPrivate: Denied(127.0.0.1) = %q", why)
	}
	// CheckBucket refuses a private endpoint before any request.
	b := goodBucket()
	b.Endpoint = "http://127.0.0.1:9"
	if err := b.Normalize(); err != nil || !b.PathStyle {
		t.Fatalf("Normalize(address endpoint) = %v, PathStyle %v; want path style", err, b.PathStyle)
	}
	err := CheckBucket(context.Background(), b, &BucketDialer{}, 0)
	var be *BucketError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "--volume-bucket-allow-private") {
		t.Fatalf("CheckBucket(loopback) = %v, want a BucketError naming the flag", err)
	}
}

package artifacts

import (
	"path/filepath"
	"testing"
)

// FuzzParseSpec: any --artifacts value is refused or yields a valid
// bucket and prefix; it never panics.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"s3://bucket/prefix", "s3://b.c-d/x/y/", "/var/lib/airlock", "file:///x", "s3://u:p@b/x", "s3://B/x", "gs://b", ""} {
		f.Add(s)
	}
	env := func(k string) string {
		return map[string]string{EnvAccessKey: "a", EnvSecretKey: "s"}[k]
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := ParseSpec(s, env)
		if err != nil {
			return
		}
		if sp.S3 != nil {
			if validBucket(sp.S3.Bucket) != nil {
				t.Fatalf("%q gave bucket %q", s, sp.S3.Bucket)
			}
			if sp.S3.Prefix != "" && ValidKey(sp.S3.Prefix) != nil {
				t.Fatalf("%q gave prefix %q", s, sp.S3.Prefix)
			}
		} else if !filepath.IsAbs(sp.Local) {
			t.Fatalf("%q gave local path %q", s, sp.Local)
		}
	})
}

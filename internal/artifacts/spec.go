package artifacts

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Environment variables an s3:// spec reads.
const (
	EnvEndpoint  = "AIRLOCK_S3_ENDPOINT" // host[:port] or http(s)://host[:port]; default AWS S3
	EnvAccessKey = "AWS_ACCESS_KEY_ID"
	EnvSecretKey = "AWS_SECRET_ACCESS_KEY"
	EnvRegion    = "AWS_REGION" // default us-east-1
)

// Spec is a parsed --artifacts value.
type Spec struct {
	// Local is the directory of a local backend ("" for S3).
	Local string
	// S3 is set for an s3:// value.
	S3 *S3Config
}

// ParseSpec parses an --artifacts value: "s3://bucket[/prefix]" (the
// endpoint, credentials and region come from getenv: AIRLOCK_S3_ENDPOINT,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), or a local
// directory ("/path" or "file:///path").
func ParseSpec(spec string, getenv func(string) string) (Spec, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return Spec{}, errors.New("empty artifact store: want s3://bucket/prefix or a directory")
	case strings.HasPrefix(spec, "s3://"):
		return parseS3(spec, getenv)
	case strings.HasPrefix(spec, "file://"):
		u, err := url.Parse(spec)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" || u.RawQuery != "" || u.Fragment != "" {
			return Spec{}, fmt.Errorf("artifact store %q: want file:///absolute/path", spec)
		}
		return Spec{Local: filepath.Clean(u.Path)}, nil
	case strings.Contains(spec, "://"):
		return Spec{}, fmt.Errorf("artifact store %q: unknown scheme (want s3://bucket/prefix or a directory)", spec)
	}
	abs, err := filepath.Abs(spec)
	if err != nil {
		return Spec{}, fmt.Errorf("artifact store %q: %w", spec, err)
	}
	return Spec{Local: abs}, nil
}

func parseS3(spec string, getenv func(string) string) (Spec, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return Spec{}, fmt.Errorf("artifact store %q: %w", spec, err)
	}
	if u.User != nil {
		return Spec{}, fmt.Errorf("artifact store %q: no credentials in the URL; set %s and %s", redact(u), EnvAccessKey, EnvSecretKey)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Port() != "" {
		return Spec{}, fmt.Errorf("artifact store %q: want s3://bucket/prefix (the endpoint comes from %s)", spec, EnvEndpoint)
	}
	if err := validBucket(u.Host); err != nil {
		return Spec{}, fmt.Errorf("artifact store %q: %w", spec, err)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := ValidKey(prefix); err != nil {
			return Spec{}, fmt.Errorf("artifact store %q: prefix: %w", spec, err)
		}
	}
	cfg := &S3Config{
		Endpoint:  getenv(EnvEndpoint),
		Bucket:    u.Host,
		Prefix:    prefix,
		Region:    getenv(EnvRegion),
		AccessKey: getenv(EnvAccessKey),
		SecretKey: getenv(EnvSecretKey),
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return Spec{}, fmt.Errorf("artifact store %s: set %s and %s", spec, EnvAccessKey, EnvSecretKey)
	}
	if e := cfg.Endpoint; e != "" {
		if _, _, err := parseEndpoint(e); err != nil {
			return Spec{}, fmt.Errorf("%s: %w", EnvEndpoint, err)
		}
	}
	return Spec{S3: cfg}, nil
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// validBucket checks S3's bucket naming rules: 3–63 characters of
// lowercase letters, digits, '.' and '-', starting and ending with a letter
// or digit.
func validBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q: want 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '.' && c != '-' || (i == 0 || i == len(b)-1) && !alnum {
			return fmt.Errorf("bucket %q: lowercase letters, digits, '.' and '-', starting and ending with a letter or digit", b)
		}
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket %q: no two dots in a row", b)
	}
	return nil
}

// Backend makes the spec's backend. It does not contact it (see Check).
func (sp Spec) Backend() (Backend, error) {
	if sp.S3 != nil {
		return NewS3(*sp.S3)
	}
	if sp.Local == "" {
		return nil, errors.New("artifacts: empty spec")
	}
	return NewLocal(sp.Local)
}

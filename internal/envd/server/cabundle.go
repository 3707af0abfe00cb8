//go:build linux

package server

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The CA bundle /init installs (E2B's caBundle, spec §11.4): the egress
// proxy's CA for sandboxes with network rules, appended to the system
// bundle as a marked block (replaced, not repeated, by the next /init: a
// resume, a rotated CA) and kept as its own file, as E2B's agent does.
const (
	DefaultCABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	DefaultCAExtraPath  = "/usr/local/share/ca-certificates/e2b-ca.crt"
	caBegin             = "# BEGIN airlock egress CA\n"
	caEnd               = "# END airlock egress CA\n"
)

// checkCABundle accepts one or more PEM certificates and nothing else.
func checkCABundle(b []byte) error {
	rest, n := bytes.TrimSpace(b), 0
	for len(rest) > 0 {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil || blk.Type != "CERTIFICATE" {
			return errors.New("caBundle: want PEM certificates only")
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("caBundle: %w", err)
		}
		rest, n = bytes.TrimSpace(rest), n+1
	}
	if n == 0 {
		return errors.New("caBundle: no certificate")
	}
	return nil
}

// installCABundle writes b into bundle (its marked block) and extra.
func installCABundle(b []byte, bundle, extra string) error {
	if err := checkCABundle(b); err != nil {
		return err
	}
	b = append(bytes.TrimSpace(b), '\n')
	old, err := os.ReadFile(bundle)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if i := bytes.Index(old, []byte(caBegin)); i >= 0 {
		if j := bytes.Index(old[i:], []byte(caEnd)); j >= 0 {
			old = append(old[:i:i], old[i+j+len(caEnd):]...)
		}
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	out := append(append(append(old, caBegin...), b...), caEnd...)
	for _, w := range []struct {
		path string
		data []byte
	}{{extra, b}, {bundle, out}} {
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			return err
		}
		tmp := w.path + ".airlock-tmp"
		if err := os.WriteFile(tmp, w.data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, w.path); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}

// caEnv are the variables that make Python requests, Node and curl use
// the bundle (set for processes unless the create set them).
func caEnv(bundle, extra string) map[string]string {
	return map[string]string{"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "CURL_CA_BUNDLE": bundle, "NODE_EXTRA_CA_CERTS": extra}
}

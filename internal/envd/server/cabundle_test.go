//go:build linux

package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
)

func testCAPEM(t *testing.T, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestInitInstallsCABundle(t *testing.T) {
	dir := t.TempDir()
	bundle, extra := filepath.Join(dir, "certs", "ca-certificates.crt"), filepath.Join(dir, "local", "e2b-ca.crt")
	system := "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----\n"
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, []byte(system), 0o644); err != nil {
		t.Fatal(err)
	}
	st := state.New("root")
	h := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), Options{SetClock: func(time.Time) error { return nil },
		CABundlePath: bundle, CAExtraPath: extra})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); _ = h.(io.Closer).Close() })
	initWith := func(body map[string]any) int {
		raw, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+"/init", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ca1, ca2 := testCAPEM(t, "one"), testCAPEM(t, "two")
	if st := initWith(map[string]any{"caBundle": ca1, "envVars": map[string]string{"CURL_CA_BUNDLE": "/mine"}}); st != 204 {
		t.Fatalf("init = %d", st)
	}
	got, _ := os.ReadFile(bundle)
	if !strings.HasPrefix(string(got), system) || !strings.Contains(string(got), ca1) {
		t.Fatalf("bundle after init:\n%s", got)
	}
	if x, _ := os.ReadFile(extra); strings.TrimSpace(string(x)) != strings.TrimSpace(ca1) {
		t.Fatalf("extra file: %s", x)
	}
	env := st.EnvVars()
	if env["SSL_CERT_FILE"] != bundle || env["REQUESTS_CA_BUNDLE"] != bundle || env["NODE_EXTRA_CA_CERTS"] != extra || env["CURL_CA_BUNDLE"] != "/mine" {
		t.Fatalf("env %v", env)
	}
	// A second /init (a resume, a rotated CA) replaces the block.
	if st := initWith(map[string]any{"caBundle": ca2}); st != 204 {
		t.Fatalf("second init = %d", st)
	}
	got, _ = os.ReadFile(bundle)
	if strings.Contains(string(got), ca1) || strings.Count(string(got), caBegin) != 1 || !strings.Contains(string(got), ca2) || !strings.HasPrefix(string(got), system) {
		t.Fatalf("bundle after a second init:\n%s", got)
	}
	if st := initWith(map[string]any{"caBundle": "not a certificate"}); st != 400 {
		t.Fatalf("bad caBundle = %d", st)
	}
}

//go:build linux

package process

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

// FuzzStartRequestDecoding decodes arbitrary JSON as a StartRequest and runs
// the request validation: it must never panic, and whatever it accepts must
// be representable by execve (no NUL, no '=' in names, PATH first).
func FuzzStartRequestDecoding(f *testing.F) {
	f.Add(`{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"],"envs":{"A":"b"},"cwd":"~/x"},"stdin":false}`)
	f.Add(`{"process":{"cmd":"sh","envs":{"A=B":"c"}},"tag":"_system"}`)
	f.Add(`{"process":{"cmd":"x\u0000y"},"pty":{"size":{"cols":80,"rows":24}}}`)
	f.Add(`{"process":{"cmd":"","envs":{"":"v"}}}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req processpb.StartRequest
		if err := protojson.Unmarshal([]byte(body), &req); err != nil {
			return
		}
		cfg := req.GetProcess()
		if err := checkArgv(cfg.GetCmd(), cfg.GetArgs()); err == nil {
			if cfg.GetCmd() == "" || strings.ContainsRune(cfg.GetCmd(), 0) {
				t.Fatalf("accepted cmd %q", cfg.GetCmd())
			}
		}
		u := &identity.User{Name: "user", Home: "/home/user"}
		env, err := buildEnv("/bin", u, map[string]string{"D": "1"}, cfg.GetEnvs())
		if err != nil {
			return
		}
		if env[0] != "PATH=/bin" {
			t.Fatalf("PATH not first: %q", env)
		}
		for _, kv := range env {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.ContainsRune(kv, 0) {
				t.Fatalf("bad env entry %q", kv)
			}
		}
		cwd := identity.ResolvePath(cfg.GetCwd(), u.Home, "")
		if !strings.HasPrefix(cwd, "/") {
			t.Fatalf("cwd %q not absolute", cwd)
		}
	})
}

package cli

import (
	"io"
	"strings"
	"testing"
)

func TestServeFlags(t *testing.T) {
	t.Setenv("AIRLOCK_STORE", "")
	cmd := newServeCmd()
	for _, name := range []string{"listen", "data-dir", "envd-path", "runtime", "domain", "subnet", "log-level", "kill-on-exit", "artifacts", "artifact-gc-interval", "store"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("flag --%s missing", name)
		}
	}
	if got := cmd.Flags().Lookup("store").DefValue; got != "" {
		t.Errorf("--store default %q, want empty (SQLite in the data dir)", got)
	}
	if got := cmd.Flags().Lookup("listen").DefValue; got != "127.0.0.1:49982" {
		t.Errorf("--listen default %q", got)
	}
	if got := cmd.Flags().Lookup("artifact-gc-interval").DefValue; got != "1h0m0s" {
		t.Errorf("--artifact-gc-interval default %q, want an hour", got)
	}
}

func TestServeDenyOutFlags(t *testing.T) {
	cmd := newServeCmd()
	def := cmd.Flags().Lookup("deny-out").DefValue
	if def != "[10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,198.18.0.0/15]" {
		t.Errorf("--deny-out default %s", def)
	}
	// An empty value is "off": a non-nil, empty list (nil would mean the defaults).
	off := newServeCmd()
	if err := off.Flags().Parse([]string{"--deny-out="}); err != nil {
		t.Fatal(err)
	}
	if v, _ := off.Flags().GetStringSlice("deny-out"); v == nil || len(v) != 0 {
		t.Errorf("--deny-out= parsed as %#v, want an empty list", v)
	}
	if cmd.Flags().Lookup("deny-out-except") == nil {
		t.Error("flag --deny-out-except missing")
	}
	// A bad range stops the daemon at start, before it touches anything,
	// with an error that names the flag and the entry.
	for _, c := range []struct{ args, want string }{
		{"--deny-out=10.0.0.0/33", `invalid --deny-out entry "10.0.0.0/33"`},
		{"--deny-out=fc00::/7", `invalid --deny-out entry "fc00::/7": only IPv4`},
		{"--deny-out-except=mirror.internal", `invalid --deny-out-except entry "mirror.internal"`},
		{"--deny-out=none,10.0.0.0/8", `"none" cannot be combined`},
	} {
		cmd := newServeCmd()
		cmd.SetArgs([]string{c.args, "--data-dir", t.TempDir(), "--log-level", "error"})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %s: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

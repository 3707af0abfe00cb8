package cli

import "testing"

func TestServeFlags(t *testing.T) {
	t.Setenv("AIRLOCK_STORE", "")
	cmd := newServeCmd()
	for _, name := range []string{"listen", "data-dir", "envd-path", "runtime", "domain", "subnet", "log-level", "kill-on-exit", "artifacts", "store"} {
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
}

package imagebuild

import (
	"net/netip"
	"testing"
)

func TestParseAddrRules(t *testing.T) {
	rules, err := ParseAddrRules([]string{"127.0.0.1:5000, 10.0.0.0/8", "::1", "[::1]:443", "::ffff:127.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"127.0.0.1:5000", "10.0.0.0/8", "::1/128", "[::1]:443", "127.0.0.2/32"}
	if len(rules) != len(want) {
		t.Fatalf("rules %v, want %v", rules, want)
	}
	for i, r := range rules {
		if r.String() != want[i] {
			t.Errorf("rule %d = %s, want %s", i, r, want[i])
		}
	}
	if !rules[0].allows(netip.MustParseAddr("127.0.0.1"), 5000) || rules[0].allows(netip.MustParseAddr("127.0.0.1"), 5001) {
		t.Error("ip:port rule matches the wrong ports")
	}
	for _, bad := range []string{"registry.example", "10.0.0.0/33", "1.2.3.4:99999"} {
		if _, err := ParseAddrRules([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

package network

import (
	"errors"
	"net/netip"
	"testing"
)

func TestHostIfName(t *testing.T) {
	cases := []struct {
		prefix string
		slot   int
		want   string
	}{
		{"airlock", 31, "airlock0001f"},
		{"altest", 0, "altest00000"},
		{"averyverylongprefix", MaxSlot, "averyverylfffff"},
	}
	for _, c := range cases {
		got := HostIfName(c.prefix, c.slot)
		if got != c.want {
			t.Errorf("HostIfName(%q, %d) = %q, want %q", c.prefix, c.slot, got, c.want)
		}
		if len(got) > 15 {
			t.Errorf("HostIfName(%q, %d) = %q is longer than 15", c.prefix, c.slot, got)
		}
	}
}

func TestEndpointFor(t *testing.T) {
	cfg, err := Config{Subnet: netip.MustParsePrefix("10.99.0.0/24"), NamePrefix: "altest"}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := endpointFor(cfg, "abc", 3)
	if err != nil {
		t.Fatal(err)
	}
	if ep.HostIP != netip.MustParseAddr("10.99.0.13") || ep.GuestIP != netip.MustParseAddr("10.99.0.14") ||
		ep.PrefixLen != 30 || ep.HostIf != "altest00003" || ep.NetNSPath != "/var/run/netns/altest-abc" {
		t.Errorf("unexpected endpoint %+v", ep)
	}
	// 10.99.0.0/24 has 64 slots.
	if _, err := endpointFor(cfg, "abc", 64); !errors.Is(err, ErrInvalid) {
		t.Errorf("slot 64 of a /24: err = %v, want ErrInvalid", err)
	}
	for _, id := range []string{"", "a/b", "..", "a b", "x\x00"} {
		if _, err := endpointFor(cfg, id, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("id %q: err = %v, want ErrInvalid", id, err)
		}
	}
	if _, err := endpointFor(cfg, "ok", -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("slot -1: err = %v, want ErrInvalid", err)
	}
}

func TestConfigNormalize(t *testing.T) {
	cfg, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NamePrefix != DefaultNamePrefix || cfg.Subnet.String() != DefaultSubnet {
		t.Errorf("defaults: %+v", cfg)
	}
	bad := []Config{
		{NamePrefix: "Bad"},
		{NamePrefix: "1abc"},
		{NamePrefix: "a-b"},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
		{Subnet: netip.MustParsePrefix("10.0.0.0/31")},
	}
	for _, c := range bad {
		if _, err := c.normalize(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", c, err)
		}
	}
}

func TestIDFromNetNSName(t *testing.T) {
	if id, ok := idFromNetNSName("altest", "altest-x1"); !ok || id != "x1" {
		t.Errorf("got %q %v", id, ok)
	}
	for _, n := range []string{"airlock-x1", "altestx1", "altest-", "xaltest-ext"} {
		if _, ok := idFromNetNSName("altest", n); ok {
			t.Errorf("%q should not be ours", n)
		}
	}
}

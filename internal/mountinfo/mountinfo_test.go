//go:build linux

package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:   "/a b",
		`/t\011x`:   "/t\tx",
		`/back\134`: `/back\`,
		`/plain`:    "/plain",
		`/bad\9z`:   `/bad\9z`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnderFindsProc(t *testing.T) {
	mps, err := Under("/proc")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mp := range mps {
		if mp == "/proc" {
			found = true
		}
		if mp != "/proc" && len(mp) > 5 && mp[:6] != "/proc/" {
			t.Errorf("%q is not under /proc", mp)
		}
	}
	if !found {
		t.Fatalf("/proc not among %v", mps)
	}
}

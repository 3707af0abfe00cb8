package diskspace

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func fixed(u Usage, err error) func(string) (Usage, error) {
	return func(string) (Usage, error) { return u, err }
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve uint64
		u       Usage
		statErr error
		full    bool
		inMsg   string
	}{
		{name: "plenty", reserve: 1 << 20, u: Usage{AvailBytes: 10 << 30, TotalBytes: 20 << 30, AvailInodes: 1e6, TotalInodes: 2e6}},
		{name: "below reserve", reserve: 256 << 20, u: Usage{AvailBytes: 100 << 20, TotalBytes: 20 << 30, AvailInodes: 1e6, TotalInodes: 2e6},
			full: true, inMsg: "100.0 MiB free of 20.0 GiB"},
		{name: "zero free, no reserve", u: Usage{AvailBytes: 0, TotalBytes: 1 << 30}, full: true, inMsg: "0 KiB free"},
		{name: "no inodes", reserve: 1, u: Usage{AvailBytes: 1 << 30, TotalBytes: 2 << 30, AvailInodes: 3, TotalInodes: 1000}, full: true, inMsg: "3 of 1000 inodes"},
		{name: "inodes not reported", reserve: 1, u: Usage{AvailBytes: 1 << 30, TotalBytes: 2 << 30}},
		{name: "statfs fails", reserve: 1 << 40, statErr: errors.New("boom")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Checker{Dir: "/data", Reserve: tc.reserve, stat: fixed(tc.u, tc.statErr)}
			err := c.Check()
			if got := errors.Is(err, ErrFull); got != tc.full {
				t.Fatalf("Check() = %v, full=%v want %v", err, got, tc.full)
			}
			if tc.full && (!strings.Contains(err.Error(), tc.inMsg) || !strings.Contains(err.Error(), "disk is full")) {
				t.Errorf("message %q lacks %q", err, tc.inMsg)
			}
			if tc.full && !IsNoSpace(err) {
				t.Errorf("IsNoSpace(%v) = false", err)
			}
		})
	}
	var nilChecker *Checker
	if err := nilChecker.Check(); err != nil {
		t.Errorf("nil checker: %v", err)
	}
}

func TestIsNoSpace(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("permission denied"), false},
		{fmt.Errorf("writing: %w", syscall.ENOSPC), true},
		{fmt.Errorf("quota: %w", syscall.EDQUOT), true},
		{errors.New("mkfs.ext4: exit status 1: Could not allocate block in ext2 filesystem: No space left on device"), true},
		{errors.New("saving sandbox: database or disk is full (13)"), true},
		{fmt.Errorf("runsc checkpoint x: %w", &exec.ExitError{}), false},
	} {
		if got := IsNoSpace(tc.err); got != tc.want {
			t.Errorf("IsNoSpace(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestStatRealDir(t *testing.T) {
	u, err := Stat(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if u.TotalBytes == 0 || u.AvailBytes > u.TotalBytes {
		t.Errorf("implausible usage %+v", u)
	}
	if err := New(t.TempDir(), 0).Check(); err != nil && u.AvailBytes > 0 {
		t.Errorf("Check with no reserve on a filesystem with free space: %v", err)
	}
}

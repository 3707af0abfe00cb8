//go:build linux

package gvisor

import (
	"bytes"
	"testing"
)

func TestIsCheckpointOf(t *testing.T) {
	argv := func(s string) [][]byte { return bytes.Split([]byte(s), []byte(" ")) }
	for _, tc := range []struct {
		cmd  string
		want bool
	}{
		{"runsc --root /d/runsc --platform ptrace checkpoint --image-path /d/sandboxes/iabc/checkpoint iabc", true},
		{"runsc --root=/d/runsc checkpoint --image-path /x iabc", true},
		{"runsc --root /other/runsc checkpoint --image-path /x iabc", false},
		{"runsc --root /d/runsc checkpoint --image-path /x iabcd", false},
		{"runsc --root /d/runsc restore --detach --bundle /b --image-path /x iabc", true},
		{"runsc --root /d/runsc delete --force iabc", false},
		{"iabc", false},
	} {
		if got := isCheckpointOf(argv(tc.cmd), "/d/runsc", "iabc"); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.cmd, got, tc.want)
		}
	}
}

package runtime

import "testing"

func TestCheckMounts(t *testing.T) {
	src := t.TempDir()
	ok := []Mount{{Source: src, Destination: "/mnt/a"}, {Source: src, Destination: "/home/user/b", ReadOnly: true}}
	if err := CheckMounts(ok); err != nil {
		t.Fatalf("valid mounts refused: %v", err)
	}
	for _, bad := range [][]Mount{
		{{Source: src, Destination: "/"}},
		{{Source: src, Destination: "mnt"}},
		{{Source: src, Destination: "/mnt/../etc"}},
		{{Source: src, Destination: "/proc"}},
		{{Source: src, Destination: "/dev/x"}},
		{{Source: src, Destination: "/sys/fs"}},
		{{Source: src, Destination: AgentGuestPath}},
		{{Source: src, Destination: "/a"}, {Source: src, Destination: "/a"}},
		{{Source: "relative", Destination: "/a"}},
		{{Source: src + "/missing", Destination: "/a"}},
	} {
		if err := CheckMounts(bad); err == nil {
			t.Errorf("CheckMounts(%+v) accepted", bad)
		}
	}
}

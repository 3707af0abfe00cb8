//go:build linux

package microvm

import (
	"bytes"
	"net"
	"slices"
	"strings"
	"testing"
)

func TestQEMUArgs(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	vm := VM{Name: "airlock-x", Accel: "tcg", CPUs: 2, MemoryMB: 512, KernelFD: 3, InitrdFD: 4, BaseFD: 5, OverlayFD: 6, ConfigFD: 7,
		Cmdline: "console=ttyS0", TapName: "tap0", MAC: mac}
	args, err := QEMU{}.Args(vm)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{"-accel tcg", "-cpu max", "-m 512", "-smp 2", "-no-reboot", "-nodefaults",
		"-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-kernel /proc/self/fd/3", "-initrd /proc/self/fd/4", "-add-fd fd=5,set=1", "-add-fd fd=6,set=2",
		"backing=base", "ifname=tap0", "mac=02:00:00:00:00:01"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %s", want, joined)
		}
	}
	// No host paths: every file is a descriptor.
	for _, a := range args {
		if strings.HasPrefix(a, "/") && !strings.HasPrefix(a, "/proc/self/fd/") {
			t.Errorf("host path in VMM args: %q", a)
		}
	}
	vm.Accel = "kvm"
	if args, _ := (QEMU{}).Args(vm); !slices.Contains(args, "host") {
		t.Errorf("kvm: want -cpu host, got %v", args)
	}
	for _, bad := range []VM{{Accel: "hvf", CPUs: 1, MemoryMB: 128}, {Accel: "tcg", CPUs: 0, MemoryMB: 128}, {Accel: "tcg", CPUs: 1, MemoryMB: 128, TapName: "tap0,script=/x"}} {
		if _, err := (QEMU{}).Args(bad); err == nil {
			t.Errorf("Args(%+v) accepted", bad)
		}
	}
}

func TestWriteCPIO(t *testing.T) {
	var b bytes.Buffer
	err := writeCPIO(&b, []cpioEntry{
		{name: "dev", mode: sIFDIR | 0o755},
		{name: "dev/console", mode: sIFCHR | 0o600, major: 5, minor: 1},
		{name: "init", mode: sIFREG | 0o755, data: strings.NewReader("hello"), size: 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "070701") || strings.Count(s, "070701") != 4 || !strings.Contains(s, "TRAILER!!!\x00") {
		t.Fatalf("not a newc archive with 3 entries and a trailer: %q", s)
	}
	if b.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-byte aligned", b.Len())
	}
	// init's header: mode 0x81ed, size 5, name length 5 ("init\0").
	i := strings.Index(s, "init\x00")
	hdr := s[i-110 : i]
	if hdr[14:22] != "000081ed" || hdr[54:62] != "00000005" || hdr[94:102] != "00000005" {
		t.Errorf("init header %q", hdr)
	}
	if !strings.Contains(s[i:], "hello") {
		t.Error("init data missing")
	}
	// The console node: major 5, minor 1 (rdevmajor, rdevminor).
	j := strings.Index(s, "dev/console\x00")
	if h := s[j-110 : j]; h[78:86] != "00000005" || h[86:94] != "00000001" {
		t.Errorf("console header %q", h)
	}
}

//go:build linux

package microvm

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// setDeviceMode gives the host device at path mode perm and owner uid:gid
// for the rest of the test, and puts the original back at cleanup.
func setDeviceMode(t *testing.T, path string, perm os.FileMode, uid, gid int) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := os.Chown(path, int(st.Uid), int(st.Gid)); err != nil {
			t.Errorf("restoring the owner of %s: %v", path, err)
		}
		if err := os.Chmod(path, os.FileMode(st.Mode&0o7777)); err != nil {
			t.Errorf("restoring the mode of %s: %v", path, err)
		}
	})
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatalf("chown %s: %v", path, err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatalf("chmod %s: %v", path, err)
	}
}

// kvmGID is the host's kvm group, or a group the VMM's user is not in.
func kvmGID() int {
	if g, err := user.LookupGroup("kvm"); err == nil {
		if n, err := strconv.Atoi(g.Gid); err == nil {
			return n
		}
	}
	return 4242
}

// devicesCheck runs as the jailed VMM's user: it lists the jail's /dev,
// opens /dev/kvm (when the jail has one) and asks for KVM's API version,
// and attaches the TAP through /dev/net/tun - what QEMU does with them.
const devicesCheck = `
import os, fcntl, struct
print("uid", os.getuid(), os.geteuid())
print("dev", " ".join(sorted(os.listdir("/dev"))), "net:", " ".join(sorted(os.listdir("/dev/net"))))
if os.path.exists("/dev/kvm"):
    fd = os.open("/dev/kvm", os.O_RDWR)
    print("kvm api", fcntl.ioctl(fd, 0xAE00))
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH22x", b"tap0", 0x1002))
print("tun attached")
`

// TestJailDevicesIgnoreHostModes starts jailed processes and microVMs with
// the host's /dev/net/tun and /dev/kvm at 0600 root:root, then with
// /dev/kvm at 0660 root:kvm (a stock distribution's mode): the VMM's user
// opens both in the jail either way, and the jail holds no other device.
// (Before, the jail bind-mounted the host's nodes, so the VMM could open
// them only where the host made them world-accessible.)
func TestJailDevicesIgnoreHostModes(t *testing.T) {
	needRoot(t)
	const python = "/usr/bin/python3" // the jail has the host's /usr only
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("python3 (the in-jail device check; apt-get install python3): %v", err)
	}
	_, kvmErr := os.Stat("/dev/kvm")
	hasKVM := kvmErr == nil
	cases := []struct {
		name     string
		kvmPerm  os.FileMode
		kvmGroup int
	}{
		{"tun 0600 root:root, kvm 0600 root:root", 0o600, 0},
		{"tun 0600 root:root, kvm 0660 root:kvm", 0o660, kvmGID()},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setDeviceMode(t, "/dev/net/tun", 0o600, 0, 0)
			if hasKVM {
				setDeviceMode(t, "/dev/kvm", c.kvmPerm, 0, c.kvmGroup)
			}
			accel := "tcg"
			if hasKVM {
				accel = "kvm" // the node is made and opened; no guest runs on it here
			}
			devs, err := jailDevices(accel, true, NobodyID, NobodyID)
			if err != nil {
				t.Fatal(err)
			}
			sh, _ := lookPath("sh")
			ip, err := lookPath("ip")
			if err != nil {
				t.Fatal("ip not found")
			}
			cmd, err := jailCommand("", sh, jail{Dir: t.TempDir(), UID: NobodyID, GID: NobodyID, Devices: devs, NewNet: true,
				Pre: ip + ` tuntap add dev tap0 mode tap user "$uid" group "$gid" && ` + ip + ` link set tap0 up`},
				[]string{python, "-c", devicesCheck})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("jailed device check: %v\n%s", err, out.String())
			}
			got := out.String()
			t.Logf("jailed device check:\n%s", got)
			wantDev := "dev net null urandom zero net: tun"
			if hasKVM {
				wantDev = "dev kvm net null urandom zero net: tun"
			}
			for _, want := range []string{"uid 65534 65534", wantDev, "tun attached"} {
				if !strings.Contains(got, want) {
					t.Errorf("jailed device check: want %q in\n%s", want, got)
				}
			}
			if hasKVM && !strings.Contains(got, "kvm api 12") {
				t.Errorf("jailed device check: /dev/kvm not usable by the VMM's user:\n%s", got)
			}

			// A real microVM (emulated here unless the host has KVM) boots
			// and its agent answers through the TAP.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, ep, _ := bootVM(t, ctx, runtime.Spec{ID: "mvmdev" + strconv.Itoa(i)})
			if out, code := guestRun(t, ctx, ep.GuestIP, "echo up"); out != "up" || code != 0 {
				t.Fatalf("guest command: %q (exit %d)", out, code)
			}
		})
	}
}

// badDriver is QEMU with an argument QEMU rejects at start.
type badDriver struct{ QEMU }

func (d badDriver) Args(vm VM) ([]string, error) {
	args, err := d.QEMU.Args(vm)
	return append(args, "-device", "airlock-no-such-device"), err
}

// TestVMMDiesEarlyFailsFast starts a VM whose VMM exits at once: waiting
// for its agent (runtime.WaitReady, as the sandbox manager does) fails
// within seconds with QEMU's own words from the console log, instead of
// polling the agent until its timeout.
func TestVMMDiesEarlyFailsFast(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "mvmdies"
	ep := sandboxNet(t, ctx, id)
	r, err := New(Config{Root: filepath.Join(t.TempDir(), "microvm"), KernelPath: fixture.kernel, Accel: "tcg", Driver: badDriver{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{ID: id, Dir: filepath.Join(t.TempDir(), "sb", id), NetNSPath: ep.NetNSPath, RootFS: fixture.rootfs, AgentPath: fixture.agent}
	t0 := time.Now()
	if err := r.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = r.Destroy(context.Background(), id, spec.Dir) })
	health := guest.URL(ep.GuestIP.String(), guest.EnvdPort, guest.PathHealth)
	err = runtime.WaitReady(ctx, r, id, r.AgentLog(spec.Dir), 0, func(ctx context.Context) error {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, health, nil)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	el := time.Since(t0)
	t.Logf("after %s: %v", el.Round(time.Millisecond), err)
	var se *runtime.StoppedError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a runtime.StoppedError", err)
	}
	if el > 5*time.Second {
		t.Errorf("the dead VMM was noticed after %s, want under 5 s", el)
	}
	if !strings.Contains(err.Error(), "airlock-no-such-device") {
		t.Errorf("error does not name the cause (QEMU's message from the console log): %v", err)
	}
}

// TestCheckAgentRefusesDynamicAgent: a dynamically linked agent (plain `go
// build` with cgo on) cannot be a microVM's init and is refused up front
// with a message that says how to build it; the static fixture passes.
func TestCheckAgentRefusesDynamicAgent(t *testing.T) {
	if err := CheckAgent("/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("CheckAgent(/bin/sh) = %v, want a refusal saying how to build a static agent", err)
	}
	if _, err := agentInitrd(t.TempDir(), "/bin/sh"); err == nil {
		t.Error("an initramfs was built around a dynamically linked agent")
	}
	if fixture.agent != "" {
		if err := CheckAgent(fixture.agent); err != nil {
			t.Errorf("static agent refused: %v", err)
		}
	}
}

//go:build linux

package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var (
	_ runtime.Cloner     = (*Runtime)(nil)
	_ runtime.LayerSaver = (*Runtime)(nil)
)

// Guest RAM of clones. A running VM maps <dir>/memory shared (so a
// checkpoint is device state only). A clone gets its own sparse copy of the
// checkpointed parent's file, mapped shared like any VM's: the copy holds
// only the pages the parent's guest had touched, the child's resident
// memory is only what its guest touches again, and the child pauses and
// forks like any other VM. One frozen file mapped share=off by all
// siblings would also share their page cache, but QEMU 7.2 opens a
// memory-backend-file read-write even for a private mapping (its
// read-only option makes guest RAM read-only), so a compromised VMM could
// write the file under its siblings' not-yet-copied pages: each child owns
// its file instead.

// SaveLayer implements runtime.LayerSaver: sparse copies of the stopped,
// checkpointed VM's overlay, guest-RAM file, config disk and VM record go
// to dst; the device state is the checkpoint's (the manager links it).
func (r *Runtime) SaveLayer(ctx context.Context, dir, dst string) error {
	dir, dst = filepath.Clean(dir), filepath.Clean(dst)
	if dst == dir || strings.HasPrefix(dst, dir+"/") {
		return fmt.Errorf("%w: snapshot dir %s is inside the sandbox dir", ErrInvalidSpec, dst)
	}
	if err := copyFiles(ctx, dir, dst, []string{overlayFile, memoryFile, configFile, vmFile}); err != nil {
		return err
	}
	return copyHandleTables(ctx, dir, dst) // a sandbox made from the snapshot keeps its guest's handles
}

func readVMRecord(dir string) (vmRecord, error) {
	var vr vmRecord
	b, err := os.ReadFile(filepath.Join(dir, vmFile))
	if err != nil {
		return vr, fmt.Errorf("reading VM record: %w", err)
	}
	if err := json.Unmarshal(b, &vr); err != nil {
		return vr, fmt.Errorf("parsing VM record: %w", err)
	}
	return vr, nil
}

// CloneSaved implements runtime.LayerSaver: Clone from a saved layer.
func (r *Runtime) CloneSaved(ctx context.Context, src string, spec runtime.Spec) error {
	return r.Clone(ctx, src, spec)
}

// copyFiles copies names from src to dst.
func copyFiles(ctx context.Context, src, dst string, names []string) error {
	for _, f := range names {
		if err := copyFile(ctx, filepath.Join(src, f), filepath.Join(dst, f)); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies src to dst (reflink and sparse where the file system
// can; the copy keeps src's owner).
func copyFile(ctx context.Context, src, dst string) error {
	out, err := helperenv.Command(ctx, "cp", "--reflink=auto", "--sparse=always", "--preserve=mode,ownership", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s: %w: %s", filepath.Base(src), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pendingAddr is recorded in a cloned VM's vm.json until its guest has
// moved from the parent's address (saved in the guest state) to the
// child's own.
type pendingAddr struct {
	From    netip.Prefix // the parent's address, which the restored guest still uses
	Gateway netip.Addr   // the parent's gateway
}

// Clone implements runtime.Cloner: spec.Dir gets sparse copies of the
// checkpointed parent's overlay, guest-RAM file (see above) and config
// disk (copyFile keeps the VMM user as owner), and a TAP in the child's
// own netns. The guest still holds the parent's IP after
// Restore: Restore re-addresses it (see readdress).
func (r *Runtime) Clone(ctx context.Context, parentDir string, spec runtime.Spec) (err error) {
	if err := runtime.CheckID(ErrInvalidSpec, spec.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(spec.Dir) || spec.NetNSPath == "" {
		return fmt.Errorf("%w: Dir must be absolute and NetNSPath set", ErrInvalidSpec)
	}
	parentDir, dir := filepath.Clean(parentDir), filepath.Clean(spec.Dir)
	vr, err := readVMRecord(parentDir)
	if err != nil {
		return fmt.Errorf("parent of %s: %w", spec.ID, err)
	}
	from, gw, err := guestAddress(vr)
	if err != nil {
		return err
	}
	if _, err := os.Stat(r.recordPath(spec.ID)); err == nil {
		return fmt.Errorf("%w: sandbox %s already exists", ErrInvalidSpec, spec.ID)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("creating sandbox dir: %w", err)
	}
	t0 := time.Now()
	var undo runtime.Cleanup
	defer undo.Unwind(ctx, &err)
	undo.Push(r.destroyStep("clone", spec.ID, dir, spec.NetNSPath))
	if err := copyFiles(ctx, parentDir, dir, []string{overlayFile, memoryFile, configFile}); err != nil {
		return fmt.Errorf("cloning %s: %w", parentDir, err)
	}
	if err := copyHandleTables(ctx, parentDir, dir); err != nil {
		return fmt.Errorf("cloning %s: %w", parentDir, err)
	}
	if err := os.Mkdir(filepath.Join(dir, jailDir), 0o700); err != nil {
		return fmt.Errorf("creating jail dir: %w", err)
	}
	gn, err := r.setupTap(ctx, spec.NetNSPath, r.uid, r.gid)
	if err != nil {
		return err
	}
	// The MAC stays the parent's (it is in the saved device state); each
	// child has its own netns, so equal MACs never meet.
	vr.GuestIP, vr.GuestPrefix, vr.Gateway = gn.Addr.Addr().String(), gn.Addr.Bits(), gn.Gateway.String()
	vr.Pending = &pendingAddr{From: from, Gateway: gw}
	if err := writeJSON(filepath.Join(dir, vmFile), vr); err != nil {
		return err
	}
	r.log.Debug("microVM cloned", "id", spec.ID, "took", time.Since(t0))
	return nil
}

// guestAddress is the address and gateway the guest of vr uses.
func guestAddress(vr vmRecord) (netip.Prefix, netip.Addr, error) {
	if vr.GuestPrefix > 0 && vr.Gateway != "" {
		a, err1 := netip.ParseAddr(vr.GuestIP)
		g, err2 := netip.ParseAddr(vr.Gateway)
		if err := errors.Join(err1, err2); err != nil {
			return netip.Prefix{}, netip.Addr{}, fmt.Errorf("VM record: %w", err)
		}
		return netip.PrefixFrom(a, vr.GuestPrefix), g, nil
	}
	// Records written before GuestPrefix: the kernel's ip= argument.
	for _, f := range strings.Fields(vr.Cmdline) {
		v, ok := strings.CutPrefix(f, "ip=")
		if !ok {
			continue
		}
		p := strings.Split(v, ":")
		if len(p) < 4 {
			break
		}
		a, err1 := netip.ParseAddr(p[0])
		g, err2 := netip.ParseAddr(p[2])
		m := net.ParseIP(p[3]).To4()
		if errors.Join(err1, err2) != nil || m == nil {
			break
		}
		bits, _ := net.IPMask(m).Size()
		return netip.PrefixFrom(a, bits), g, nil
	}
	return netip.Prefix{}, netip.Addr{}, errors.New("microvm: the parent's guest address is not recorded")
}

// Re-addressing a clone. The restored guest answers only on the parent's
// address, which the host routes to the parent. So, inside the child's own
// netns, Restore stops mirroring the TAP's frames to eth0 and puts the
// parent's gateway address on the TAP: the netns itself then talks to the
// guest on the parent's subnet. It POSTs /freeze with the child's address
// (the agent answers, then moves eth0 via netlink), takes the gateway
// address off and mirrors the TAP to eth0 again: from then on the guest is
// reached like any other at the child's address.
const (
	readdressPrepare = `set -e
tc filter del dev ` + TapName + ` parent ffff:
ip addr add "$1" dev ` + TapName + `
ip addr add ` + volumeAddrCIDR + ` dev ` + TapName + `
`
	readdressDone = `set -e
ip addr del ` + volumeAddrCIDR + ` dev ` + TapName + ` 2>/dev/null || true
ip addr del "$1" dev ` + TapName + `
tc filter add dev ` + TapName + ` parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev eth0
`
)

// prepareReaddress runs before the VMM of a clone starts.
func (r *Runtime) prepareReaddress(ctx context.Context, nsPath string, p *pendingAddr) error {
	gwAddr := netip.PrefixFrom(p.Gateway, p.From.Bits()).String()
	// A previous attempt may have left it half done.
	_, _ = r.inNetNS(ctx, nsPath, "sh", "-c", readdressDone, "sh", gwAddr)
	if _, err := r.inNetNS(ctx, nsPath, "sh", "-c", readdressPrepare, "sh", gwAddr); err != nil {
		return fmt.Errorf("preparing the clone's re-addressing: %w", err)
	}
	return nil
}

// readdress tells the restored guest of a clone its own address (see
// above) and records that it moved.
func (r *Runtime) readdress(ctx context.Context, dir, nsPath string, vr vmRecord) error {
	p := vr.Pending
	to := netip.PrefixFrom(netip.MustParseAddr(vr.GuestIP), vr.GuestPrefix)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	agent := &guest.Client{HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetNS(ctx, nsPath, network, addr)
		},
		DisableKeepAlives: true,
	}}}
	var err error
	for {
		err = agent.Readdress(ctx, p.From.Addr().String(), to, vr.Gateway)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("re-addressing the guest from %s to %s: %w", p.From, to, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	gwAddr := netip.PrefixFrom(p.Gateway, p.From.Bits()).String()
	if _, err := r.inNetNS(ctx, nsPath, "sh", "-c", readdressDone, "sh", gwAddr); err != nil {
		return fmt.Errorf("finishing the clone's re-addressing: %w", err)
	}
	vr.Pending = nil
	return writeJSON(filepath.Join(dir, vmFile), vr)
}

// dialInNetNS opens a connection from inside the network namespace at
// nsPath (the socket stays there after the thread switches back).
func dialInNetNS(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		// The thread is not unlocked if switching back fails: the Go
		// runtime then discards it instead of reusing it.
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer self.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering %s: %w", nsPath, err)}
			return
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	res := <-ch
	return res.c, res.err
}

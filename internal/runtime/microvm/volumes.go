//go:build linux

package microvm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/volume"
	"github.com/airlock-sandbox/airlock/internal/volume/nfs"
)

// Volumes on a microVM: each VM with volumeMounts gets its own NFSv3
// server (internal/volume/nfs) on the host side of its veth, exporting only
// its volumes, "/volume-<i>" each. The guest's init mounts them from
// network.VolumeServerAddr (the same address in every guest, redirected by
// the firewall to the veth's host address), so a guest restored in another
// netns finds its own server at the address its NFS client knows. The
// server is started before the VMM runs (start, restore, fork child,
// reboot) and stopped when it ends (checkpoint, shutdown, destroy); a
// restarted daemon starts them again for the VMs it finds running (New).
// File handles are the kernel's, or for a file system without them (a
// bucket volume's s3fs) ids kept in the VM's dir ("nfs-handles-<i>",
// copied to a fork child), so they outlive any one server.

// vmVolume is one mount of a VM (in vm.json, so a restore, a fork child
// and a restarted daemon serve the same volumes).
type vmVolume struct {
	Source   string // the volume's host directory
	Path     string // where the guest mounts it
	ReadOnly bool   `json:",omitempty"`
}

// GuestMount is a volume the guest's init mounts over NFS.
type GuestMount struct {
	Path     string `json:"path"`
	Server   string `json:"server"` // address:port (MOUNT and NFS)
	Export   string `json:"export"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// volumeAddrCIDR is network.VolumeServerAddr as a host address: a fork
// child's netns holds it while the child is re-addressed (clone.go), so the
// guest's NFS connections, closed by its agent before it moves, are reset
// at once by the netns (no listener there) instead of hanging.
const volumeAddrCIDR = network.VolumeServerAddrString + "/32"

// MountsVolumes implements runtime.VolumeMounter.
func (r *Runtime) MountsVolumes() bool { return true }

func vmVolumes(ms []runtime.Mount) []vmVolume {
	var vs []vmVolume
	for _, m := range ms {
		vs = append(vs, vmVolume{Source: m.Source, Path: m.Destination, ReadOnly: m.ReadOnly})
	}
	return vs
}

func exportName(i int) string { return "/volume-" + strconv.Itoa(i) }

func guestMounts(vs []vmVolume) []GuestMount {
	var gm []GuestMount
	server := net.JoinHostPort(network.VolumeServerAddr.String(), strconv.Itoa(network.VolumeGuestPort))
	for i, v := range vs {
		gm = append(gm, GuestMount{Path: v.Path, Server: server, Export: exportName(i), ReadOnly: v.ReadOnly})
	}
	return gm
}

// refreshVolumes takes the caller's mounts for a restored VM when it passes
// them (the same volumes, in the same order: export i stays volume i).
func refreshVolumes(vr *vmRecord, ms []runtime.Mount) error {
	if len(ms) == 0 {
		return nil
	}
	if len(ms) != len(vr.Volumes) {
		return fmt.Errorf("%w: the VM was started with %d volume mounts, not %d", ErrInvalidSpec, len(vr.Volumes), len(ms))
	}
	for i, m := range ms {
		if m.Destination != vr.Volumes[i].Path {
			return fmt.Errorf("%w: volume mount %d is at %s in the VM, not %s", ErrInvalidSpec, i, vr.Volumes[i].Path, m.Destination)
		}
	}
	vr.Volumes = vmVolumes(ms)
	return nil
}

// volumeServers are the running NFS servers, by sandbox id.
type volumeServers struct {
	mu sync.Mutex
	m  map[string]*nfs.Server
}

// serveVolumes (re)starts the NFS server of sandbox id for vr's volumes on
// the host side of its veth (the guest's gateway).
// dir is the VM's runtime dir, which keeps the handle tables of exports
// without kernel file handles (a bucket volume's s3fs mount). An export the
// server refuses is a runtime.MountError (the volume's fault, a 4xx).
func (r *Runtime) serveVolumes(id, dir string, vr vmRecord) error {
	r.stopVolumes(id)
	if len(vr.Volumes) == 0 {
		return nil
	}
	gw, err := netip.ParseAddr(vr.Gateway)
	if err != nil {
		return fmt.Errorf("volumes of %s: gateway %q: %w", id, vr.Gateway, err)
	}
	iface, err := ifaceWithAddr(gw)
	if err != nil {
		return fmt.Errorf("volumes of %s: %w", id, err)
	}
	exps := make([]nfs.Export, len(vr.Volumes))
	for i, v := range vr.Volumes {
		exps[i] = nfs.Export{Name: exportName(i), Dir: v.Source, ReadOnly: v.ReadOnly}
	}
	s, err := nfs.Listen(nfs.Config{
		Iface: iface, Addr: gw, Port: network.VolumeServerPort, Mark: network.VolumeServerMark,
		UID: volume.DefaultUID, GID: volume.DefaultGID, StateDir: dir,
	}, exps)
	var ee *nfs.ExportError
	if errors.As(err, &ee) {
		return fmt.Errorf("volumes of %s: %w", id, &runtime.MountError{Index: ee.Index, Err: ee.Err})
	}
	if err != nil {
		return fmt.Errorf("volumes of %s: %w", id, err)
	}
	r.vols.mu.Lock()
	if r.vols.m == nil {
		r.vols.m = map[string]*nfs.Server{}
	}
	r.vols.m[id] = s
	r.vols.mu.Unlock()
	r.log.Debug("volume server listening", "id", id, "addr", s.Addr(), "iface", iface, "volumes", len(exps))
	return nil
}

// stopVolumes stops sandbox id's NFS server, if any.
func (r *Runtime) stopVolumes(id string) {
	r.vols.mu.Lock()
	s := r.vols.m[id]
	delete(r.vols.m, id)
	r.vols.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// reattachVolumes starts the servers of the VMs a previous daemon left
// running.
func (r *Runtime) reattachVolumes() {
	ids, err := r.List(context.Background())
	if err != nil {
		return
	}
	for _, id := range ids {
		rec, err := r.readRecord(id)
		if err != nil || !alive(rec) {
			continue
		}
		vr, err := readVMRecord(rec.Dir)
		if err != nil || len(vr.Volumes) == 0 {
			continue
		}
		if err := r.serveVolumes(id, rec.Dir, vr); err != nil {
			r.log.Error("restarting the volume server of a running microVM", "id", id, "err", err)
		}
	}
}

// ifaceWithAddr is the host interface that holds a.
func ifaceWithAddr(a netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("listing interfaces: %w", err)
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return ifc.Name, nil
				}
			}
		}
	}
	return "", errors.New("no host interface has the address " + a.String())
}

// copyHandleTables gives a fork child a copy of its parent's NFS handle
// tables (exports without kernel file handles), so the handles its guest
// holds keep working.
func copyHandleTables(ctx context.Context, src, dst string) error {
	names, err := filepath.Glob(filepath.Join(src, "nfs-handles-*"))
	if err != nil {
		return err
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			continue
		}
		if err := copyFile(ctx, n, filepath.Join(dst, filepath.Base(n))); err != nil {
			return err
		}
	}
	return nil
}

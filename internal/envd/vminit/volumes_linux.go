//go:build linux

package vminit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Mount mirrors microvm.GuestMount: a volume served over NFSv3 by the
// sandbox's own server on the host (internal/volume/nfs).
type Mount struct {
	Path     string `json:"path"`
	Server   string `json:"server"` // address:port
	Export   string `json:"export"`
	ReadOnly bool   `json:"readOnly"`
}

// nfsOptions are the kernel NFS client's text options for m (mount(2)
// takes them as they are: no mount.nfs, no rpcbind). MOUNT and NFS share
// the server's one TCP port; nolock: there is no lock manager (locks stay
// local to the guest). hard: a server that is away (the VM is being
// restored, the daemon restarts) delays I/O, never fails it; timeo=30 (3 s)
// and retrans=2 bound how long a fork child, whose old connection now
// leads nowhere, waits before it reconnects. actimeo=0: another sandbox's
// writes are seen at once (attributes are asked again at every use).
func nfsOptions(addr, port string) string {
	return fmt.Sprintf("vers=3,proto=tcp,mountproto=tcp,mountvers=3,nolock,hard,timeo=30,retrans=2,actimeo=0,"+
		"addr=%[1]s,mountaddr=%[1]s,port=%[2]s,mountport=%[2]s", addr, port)
}

// mountVolumes mounts each volume at its path (created in the root disk if
// missing). A mount that fails after retries fails the boot: a sandbox
// never runs without the volumes it was created with.
func mountVolumes(ms []Mount) error {
	for _, m := range ms {
		addr, port, err := net.SplitHostPort(m.Server)
		if err != nil {
			return fmt.Errorf("volume at %s: server %q: %w", m.Path, m.Server, err)
		}
		if err := os.MkdirAll(m.Path, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", m.Path, err)
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
		if m.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		src, opts := addr+":"+m.Export, nfsOptions(addr, port)
		for i := 0; ; i++ {
			err = unix.Mount(src, m.Path, "nfs", flags, opts)
			if err == nil || i == 50 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("mounting volume %s on %s (%s): %w", src, m.Path, opts, err)
		}
	}
	return nil
}

// ReconnectVolumes makes the kernel's RPC transports (the NFS mounts')
// drop their connections, before a fork child moves to its own address.
// The connection the child's NFS client restored is its parent's: once
// the parent's address is gone from the guest, TCP can send nothing on it
// and never gives up (measured: reads hung for minutes). Writing a
// transport's server address back to its sysfs dstaddr forces a disconnect
// (net/sunrpc/sysfs.c); while the runtime holds the child's netns in its
// re-addressing state, that netns answers the close with a reset (it has
// the server's address, and no listener), so the transport is closed at
// once and reconnects from the new address at its next request. It waits
// up to wait for the transports to be closed.
func ReconnectVolumes(wait time.Duration) error {
	paths, _ := filepath.Glob("/sys/kernel/sunrpc/xprt-switches/*/xprt-*/dstaddr")
	var errs []error
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.WriteFile(p, bytes.TrimSpace(b), 0); err != nil {
			errs = append(errs, fmt.Errorf("reconnecting %s: %w", p, err))
		}
	}
	if len(paths) == 0 {
		return errors.Join(errs...)
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		open := false
		for _, p := range paths {
			st, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "xprt_state"))
			if bytes.Contains(st, []byte("CONNECTED")) || bytes.Contains(st, []byte("CLOSING")) {
				open = true
			}
		}
		if !open {
			break
		}
	}
	return errors.Join(errs...)
}

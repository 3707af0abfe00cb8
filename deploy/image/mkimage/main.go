// Command mkimage assembles and unpacks the Airlock OCI image without a
// container engine (scripts/build-image.sh and scripts/test-image.sh run it).
//
//	mkimage build  -base BASE.tar[.gz] -files DIR -ref REPO:TAG -out IMAGE.oci.tar
//	mkimage bundle -archive IMAGE.oci.tar -dir BUNDLE [-privileged] [-bind SRC:DST]... [-env K=V]... -- ARGS...
//
// build makes a two-layer image: BASE (the Debian root filesystem from
// mmdebstrap) and a layer holding DIR's tree (the binaries, runsc, the guest
// kernel). Its entrypoint is /usr/local/bin/airlock, its default command
// `serve`. The output is an OCI archive: a tar of an OCI image layout whose
// index names the image by TAG (org.opencontainers.image.ref.name, what
// `skopeo copy oci-archive:IMAGE.oci.tar:TAG` selects) and by REPO:TAG.
//
// bundle unpacks such an archive into BUNDLE/rootfs and writes
// BUNDLE/config.json (an OCI runtime spec for crun or runc): the image's
// entrypoint with ARGS, its environment, the host's network namespace (as
// the chart runs both roles), and with -privileged every capability, no
// seccomp filter and the host's /dev and /sys (as the chart's node
// DaemonSet runs).
package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mkimage build|bundle [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "bundle":
		err = bundle(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want build or bundle)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// ---------------------------------------------------------------- build

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	base := fs.String("base", "", "the base layer: a tar (or .tar.gz) of the root filesystem")
	files := fs.String("files", "", "directory whose tree is the second layer")
	ref := fs.String("ref", "", "image name, REPO:TAG")
	out := fs.String("out", "", "the OCI archive to write")
	version := fs.String("version", "", "org.opencontainers.image.version label")
	_ = fs.Parse(args)
	if *base == "" || *files == "" || *ref == "" || *out == "" {
		return errors.New("build needs -base, -files, -ref and -out")
	}
	i := strings.LastIndex(*ref, ":")
	if i < 0 || strings.Contains((*ref)[i:], "/") {
		return fmt.Errorf("-ref %q: want REPO:TAG", *ref)
	}
	repo, tag := (*ref)[:i], (*ref)[i+1:]

	baseLayer, err := tarball.LayerFromFile(*base, tarball.WithCompressionLevel(gzip.BestSpeed),
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("base layer %s: %w", *base, err)
	}
	topTar, err := os.CreateTemp(filepath.Dir(*out), ".mkimage-top-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(topTar.Name())
	if err := writeTree(topTar, *files); err != nil {
		topTar.Close()
		return fmt.Errorf("layer from %s: %w", *files, err)
	}
	if err := topTar.Close(); err != nil {
		return err
	}
	topLayer, err := tarball.LayerFromFile(topTar.Name(), tarball.WithCompressionLevel(gzip.BestSpeed),
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("top layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: baseLayer, History: v1.History{CreatedBy: "mmdebstrap (scripts/build-image.sh)", Comment: "Debian packages"}},
		mutate.Addendum{Layer: topLayer, History: v1.History{CreatedBy: "scripts/build-image.sh", Comment: "airlock, airlock-envd, runsc, guest kernel"}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: time.Now().UTC().Truncate(time.Second)}
	cf.Config.Entrypoint = []string{"/usr/local/bin/airlock"}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "airlock",
		"org.opencontainers.image.description": "Airlock: both roles (airlock serve --role api|node)",
		"org.opencontainers.image.source":      "https://github.com/airlock-sandbox/airlock",
	}
	if *version != "" {
		cf.Config.Labels["org.opencontainers.image.version"] = *version
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	dir, err := os.MkdirTemp(filepath.Dir(*out), ".mkimage-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          repo + ":" + tag,
	})); err != nil {
		return fmt.Errorf("writing the image layout: %w", err)
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := writeTree(f, dir); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	d, _ := img.Digest()
	fmt.Printf("%s %s %s\n", *out, repo+":"+tag, d)
	return nil
}

// writeTree writes the tree under root to w as a tar (paths relative to
// root, owned by root, modes and symlinks kept).
func writeTree(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// ---------------------------------------------------------------- bundle

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func bundle(args []string) error {
	fs := flag.NewFlagSet("bundle", flag.ExitOnError)
	archive := fs.String("archive", "", "the OCI archive (mkimage build's output)")
	dir := fs.String("dir", "", "the bundle directory to write (rootfs/ and config.json)")
	privileged := fs.Bool("privileged", false, "every capability, no seccomp, the host's /dev and /sys")
	reuse := fs.Bool("reuse-rootfs", false, "keep an existing DIR/rootfs unpacked from the same image")
	user := fs.String("user", "0:0", "UID:GID of the process")
	readonly := fs.Bool("readonly", false, "a read-only root filesystem (the chart's api tier)")
	noCaps := fs.Bool("drop-caps", false, "no capabilities at all (the chart's api tier: drop ALL)")
	shared := fs.String("rootfs", "", "use this rootfs (another bundle's, unpacked from the same image) instead of unpacking into DIR/rootfs")
	var binds, env listFlag
	fs.Var(&binds, "bind", "SRC:DST[:ro] bind mount (repeatable)")
	fs.Var(&env, "env", "K=V added to the process environment (repeatable)")
	_ = fs.Parse(args)
	if *archive == "" || *dir == "" {
		return errors.New("bundle needs -archive and -dir")
	}
	img, err := imageFromArchive(*archive, *dir)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	rootfs := filepath.Join(*dir, "rootfs")
	stamp := filepath.Join(*dir, "rootfs.digest")
	if *shared != "" {
		if rootfs, err = filepath.Abs(*shared); err != nil {
			return err
		}
		stamp = filepath.Join(filepath.Dir(rootfs), "rootfs.digest")
		if old, _ := os.ReadFile(stamp); string(old) != d.String() {
			return fmt.Errorf("-rootfs %s was not unpacked from %s (%s)", *shared, *archive, d)
		}
	} else if old, _ := os.ReadFile(stamp); !*reuse || string(old) != d.String() {
		if err := unpack(img, rootfs); err != nil {
			return err
		}
		if err := os.WriteFile(stamp, []byte(d.String()), 0o644); err != nil {
			return err
		}
	}
	var uid, gid int
	if _, err := fmt.Sscanf(*user, "%d:%d", &uid, &gid); err != nil {
		return fmt.Errorf("-user %q: want UID:GID", *user)
	}
	spec, err := runtimeSpec(cf, rootfs, fs.Args(), binds, env, *privileged)
	if err != nil {
		return err
	}
	proc := spec["process"].(map[string]any)
	proc["user"] = map[string]int{"uid": uid, "gid": gid}
	if *noCaps {
		proc["capabilities"] = map[string][]string{}
	}
	spec["root"].(map[string]any)["readonly"] = *readonly
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*dir, "config.json"), b, 0o644)
}

// imageFromArchive reads the single image of an OCI archive (unpacking the
// archive's layout under scratch/layout).
func imageFromArchive(archive, scratch string) (v1.Image, error) {
	ldir := filepath.Join(scratch, "layout")
	if err := os.RemoveAll(ldir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(ldir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", ldir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unpacking %s: %w: %s", archive, err, out)
	}
	lp, err := layout.FromPath(ldir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI archive: %w", archive, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d manifests, want 1", archive, len(im.Manifests))
	}
	return idx.Image(im.Manifests[0].Digest)
}

// unpack writes the image's flattened filesystem to rootfs (GNU tar does the
// writing: device nodes, owners, hard links).
func unpack(img v1.Image, rootfs string) error {
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.Command("tar", "-x", "--numeric-owner", "--same-permissions", "-C", rootfs)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking the image into %s: %w: %s", rootfs, err, out)
	}
	return nil
}

// allCaps are the capabilities a privileged container gets, in
// capability-number order (CAP_CHOWN is 0).
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN",
	"CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// boundedCaps is allCaps within this process's bounding set (as a
// privileged container gets every capability its runtime has: a runtime
// cannot grant one it lacks).
func boundedCaps() []string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return allCaps
	}
	for _, l := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(l, "CapBnd:")
		if !ok {
			continue
		}
		var mask uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(hex), "%x", &mask); err != nil {
			return allCaps
		}
		var out []string
		for i, c := range allCaps { // allCaps is in capability-number order
			if mask&(1<<uint(i)) != 0 {
				out = append(out, c)
			}
		}
		return out
	}
	return allCaps
}

// defaultCaps are an unprivileged container's (Docker's default set).
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
	"CAP_AUDIT_WRITE",
}

type mount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// runtimeSpec is the OCI runtime spec (config.json) of the bundle.
func runtimeSpec(cf *v1.ConfigFile, rootfs string, args, binds, env []string, privileged bool) (map[string]any, error) {
	argv := append(append([]string{}, cf.Config.Entrypoint...), args...)
	if len(args) == 0 {
		argv = append(argv, cf.Config.Cmd...)
	}
	if len(argv) == 0 {
		return nil, errors.New("the image has no entrypoint and no arguments were given")
	}
	caps := defaultCaps
	if privileged {
		caps = boundedCaps()
	}
	mounts := []mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		// The host's network (hostNetwork: true): its resolver and names.
		{Destination: "/etc/resolv.conf", Type: "bind", Source: "/etc/resolv.conf", Options: []string{"rbind", "ro"}},
		{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts", Options: []string{"rbind", "ro"}},
	}
	if privileged {
		mounts = append(mounts,
			// The chart mounts the host's /dev (loop devices, /dev/net/tun, /dev/kvm).
			mount{Destination: "/dev", Type: "bind", Source: "/dev", Options: []string{"rbind", "rw"}},
			mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "rw"}},
		)
	} else {
		mounts = append(mounts,
			mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		)
	}
	for _, b := range binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("-bind %q: want SRC:DST[:ro]", b)
		}
		opts := []string{"rbind", "rw"}
		if len(parts) == 3 && parts[2] == "ro" {
			opts[1] = "ro"
		}
		mounts = append(mounts, mount{Destination: parts[1], Type: "bind", Source: parts[0], Options: opts})
	}
	linux := map[string]any{
		// A mount namespace only: the host's network, PIDs, IPC and UTS.
		"namespaces": []map[string]string{{"type": "mount"}},
	}
	if privileged {
		// Every device (loop devices, /dev/net/tun, /dev/kvm): a runtime's
		// default device cgroup allows only the standard few.
		linux["resources"] = map[string]any{"devices": []map[string]any{{"allow": true, "access": "rwm"}}}
	} else {
		linux["maskedPaths"] = []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"}
		linux["readonlyPaths"] = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]int{"uid": 0, "gid": 0},
			"args":     argv,
			"env":      append(append([]string{}, cf.Config.Env...), env...),
			"cwd":      "/",
			"capabilities": map[string][]string{
				"bounding": caps, "effective": caps, "permitted": caps,
			},
			"noNewPrivileges": !privileged,
		},
		"root":     map[string]any{"path": rootfs, "readonly": false},
		"hostname": "",
		"mounts":   mounts,
		"linux":    linux,
	}, nil
}

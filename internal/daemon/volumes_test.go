package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// A cluster node keeps volumes only on --volume-root (the shared
// filesystem), which must exist; without it the node has none and says
// why, and never falls back to storage of its own.
func TestSharedVolumeRoot(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(node bool, backing, root string) *daemon {
		d := &daemon{log: log, dataDir: t.TempDir()}
		d.role.node = node
		d.cfg.Volumes = Volumes{Backing: backing, Root: root}
		return d
	}
	shared := t.TempDir()
	d := mk(true, "auto", shared)
	b, err := d.openVolumes()
	if _, ok := b.(*volume.DirBacking); !ok || err != nil {
		t.Fatalf("node with --volume-root: %T, %v, want a DirBacking", b, err)
	}
	if ls := d.nodeLabels(); !slices.Contains(ls, cluster.LabelVolumes) {
		t.Fatalf("node labels %v lack %q", ls, cluster.LabelVolumes)
	}

	d = mk(true, "auto", "")
	if b, err := d.openVolumes(); b != nil || err != nil {
		t.Fatalf("node without --volume-root: %v, %v, want no volumes", b, err)
	}
	if d.noVolumes() != cluster.NoVolumeRoot || slices.Contains(d.nodeLabels(), cluster.LabelVolumes) {
		t.Fatalf("node without the root: reason %q, labels %v", d.noVolumes(), d.nodeLabels())
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "volumes")); !os.IsNotExist(err) {
		t.Fatalf("a node without the root made local volume storage: %v", err)
	}
	for _, c := range []struct {
		d    *daemon
		want string
	}{
		{mk(true, "loop", ""), "needs --volume-root"},
		{mk(true, "dir", ""), "needs --volume-root"},
		{mk(true, "auto", filepath.Join(shared, "not-mounted")), "mount the shared filesystem"},
		{mk(false, "loop", shared), "--volume-backing dir or auto"},
		{mk(false, "auto", "relative/dir"), "absolute"},
	} {
		if _, err := c.d.openVolumes(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("node=%v backing=%s root=%s: %v, want an error saying %q", c.d.role.node, c.d.cfg.Volumes.Backing, c.d.cfg.Volumes.Root, err, c.want)
		}
	}
	// A single host may use a shared root too.
	if b, err := mk(false, "dir", shared).openVolumes(); err != nil || b == nil {
		t.Fatalf("single host with --volume-root: %v, %v", b, err)
	}
}

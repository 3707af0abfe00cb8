package daemon

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/network"
)

// Builds limits what a template build's FROM may read (the
// --registry-allow, --image-dir and --max-image-mb flags).
type Builds struct {
	// RegistryAllow are addresses (IPs, CIDRs, ip:port) a registry pull may
	// connect to although sandboxes may not reach them (a registry on the
	// host's loopback or in a private network).
	RegistryAllow []string
	// ImageDir is the directory FROM oci-layout:// and docker-archive://
	// images must be in ("" refuses them).
	ImageDir string
	// MaxImageMB caps what one FROM image may unpack to (0: the default).
	MaxImageMB int
}

// pullConfig builds the imagebuild.PullConfig: registry pulls are denied
// what sandboxes are denied (network.Config.Denies over the pool and the
// operator deny list), less RegistryAllow.
func (b Builds) pullConfig(subnet netip.Prefix, deny, except []netip.Prefix) (imagebuild.PullConfig, error) {
	allow, err := imagebuild.ParseAddrRules(b.RegistryAllow)
	if err != nil {
		return imagebuild.PullConfig{}, err
	}
	if b.MaxImageMB < 0 {
		return imagebuild.PullConfig{}, fmt.Errorf("invalid --max-image-mb %d: want a positive size (0: the default)", b.MaxImageMB)
	}
	dir := b.ImageDir
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return imagebuild.PullConfig{}, fmt.Errorf("resolving --image-dir: %w", err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return imagebuild.PullConfig{}, fmt.Errorf("--image-dir %s: not a directory", dir)
		}
	}
	nc := network.Config{Subnet: subnet, DenyOut: deny, DenyOutExcept: except}
	return imagebuild.PullConfig{Denies: nc.Denies, Allow: allow, ImageDir: dir, MaxImageBytes: int64(b.MaxImageMB) << 20}, nil
}

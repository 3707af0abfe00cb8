//go:build !linux

package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// On other systems the binary is the CLI only: `airlock serve` needs Linux
// (namespaces, cgroups, nftables, gVisor or KVM), so it says so instead of
// starting.
func init() {
	register(func(root *cobra.Command) {
		root.AddCommand(&cobra.Command{
			Use:   "serve",
			Short: "Run the Airlock daemon (Linux only)",
			RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("airlock serve runs on Linux only (this is %s/%s); the other commands work against a daemon elsewhere (--url or AIRLOCK_URL)", runtime.GOOS, runtime.GOARCH)
			},
		})
	})
}

// Package cli implements the airlock command line: `airlock serve` (the
// daemon) and the client subcommands. One file per subcommand group.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// NewRoot builds the command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Self-hosted, E2B-compatible sandboxes for untrusted code",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, add := range registry {
		add(root)
	}
	return root
}

// registry holds functions that attach subcommands; each subcommand file
// registers itself in an init function so files can be added independently.
var registry []func(root *cobra.Command)

func register(f func(root *cobra.Command)) { registry = append(registry, f) }

// Execute runs the CLI and exits with a non-zero status on error.
func Execute(ctx context.Context) {
	if err := NewRoot().ExecuteContext(ctx); err != nil {
		// A remote command's exit status is passed through silently.
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
}

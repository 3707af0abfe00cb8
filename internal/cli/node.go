package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func init() {
	register(func(root *cobra.Command) {
		nc := &cobra.Command{
			Use:     "node",
			Aliases: []string{"nodes"},
			Short:   "Nodes of an Airlock cluster (through an api tier: airlock serve --role api)",
		}
		nc.AddCommand(newNodeListCmd(), newNodeDrainCmd(true), newNodeDrainCmd(false))
		root.AddCommand(nc)
	})
}

func newNodeListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the cluster's nodes: state, load and last heartbeat",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			ns, err := c.ListNodes(cmd.Context())
			if err != nil {
				if airlock.IsNotFound(err) {
					return fmt.Errorf("%w (is this a single host? nodes exist behind airlock serve --role api)", err)
				}
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ns)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tSTATE\tADDR\tRUNTIME\tSANDBOXES\tCPU\tMEMORY\tHEARTBEAT\tLABELS")
			for _, n := range ns {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%d/%d MiB\t%s ago\t%s\n", n.ID, n.State, n.Addr, n.Runtime,
					n.Sandboxes, n.MaxSandboxes, n.ReservedCPUs, n.CPUs, n.ReservedMemoryMB, n.MemoryMB,
					(time.Duration(n.HeartbeatAgeMs) * time.Millisecond).Round(100*time.Millisecond),
					firstNonEmpty(strings.Join(n.Labels, ","), "-"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newNodeDrainCmd(drain bool) *cobra.Command {
	use, short := "drain <node>...", "Stop placing new sandboxes on nodes and move their sandboxes to other nodes (with an artifact store)"
	if !drain {
		use, short = "undrain <node>...", "Let placement use drained nodes again"
	}
	var keep bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			for _, id := range args {
				if !drain {
					if err := c.DrainNode(cmd.Context(), id, false); err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), id)
					fmt.Fprintf(cmd.ErrOrStderr(), "node %s is live: placement uses it again\n", id)
					continue
				}
				res, err := c.Drain(cmd.Context(), id, !keep)
				if err != nil {
					return err
				}
				// The node on stdout; what moved, on stderr.
				fmt.Fprintln(cmd.OutOrStdout(), id)
				for _, m := range res.Moved {
					fmt.Fprintf(cmd.ErrOrStderr(), "moved %s to %s (%s)\n", m.SandboxID, m.Node, m.State)
				}
				for _, m := range res.Failed {
					fmt.Fprintf(cmd.ErrOrStderr(), "not moved %s: %s\n", m.SandboxID, m.Error)
				}
				if len(res.Failed) > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "node %s is draining: no new sandboxes go there; %d sandboxes moved, %d stay on it (airlock node undrain %s: placement uses it again)\n",
						id, len(res.Moved), len(res.Failed), id)
					return fmt.Errorf("drain %s: %d sandboxes could not move (they stay on it)", id, len(res.Failed))
				}
				switch {
				case keep:
					fmt.Fprintf(cmd.ErrOrStderr(), "node %s is draining: no new sandboxes go there; its sandboxes stay (--keep)\n", id)
				case len(res.Moved) == 0:
					fmt.Fprintf(cmd.ErrOrStderr(), "node %s is draining: no new sandboxes go there; it had no sandboxes to move\n", id)
				default:
					fmt.Fprintf(cmd.ErrOrStderr(), "node %s is draining: no new sandboxes go there; %d sandboxes moved\n", id, len(res.Moved))
				}
			}
			return nil
		},
	}
	if drain {
		cmd.Flags().BoolVar(&keep, "keep", false, "only stop placement: leave the node's sandboxes where they are")
	}
	return cmd
}

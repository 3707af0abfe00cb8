package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func newPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause <id>...",
		Short: "Pause sandboxes (memory, processes and disk are kept; resume with 'resume' or 'connect')",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forEachSandbox(cmd, args, func(c *airlock.Client, id string) error {
				return c.PauseSandbox(cmd.Context(), id)
			})
		},
	}
}

func newResumeCmd() *cobra.Command {
	var timeout int
	cmd := &cobra.Command{
		Use:   "resume <id>...",
		Short: "Resume paused sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forEachSandbox(cmd, args, func(c *airlock.Client, id string) error {
				_, err := c.ResumeSandbox(cmd.Context(), id, timeout)
				return err
			})
		},
	}
	cmd.Flags().IntVar(&timeout, "timeout", 300, "seconds until the resumed sandbox expires")
	return cmd
}

func newForkCmd() *cobra.Command {
	var count, timeout int
	cmd := &cobra.Command{
		Use:   "fork <id>",
		Short: "Copy a running sandbox (memory, processes and disk); prints one new sandbox id per line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			res, err := c.ForkSandbox(cmd.Context(), args[0], count, timeout)
			if err != nil {
				return explain(args[0], err)
			}
			var errs []error
			for i, r := range res {
				switch {
				case r.Sandbox != nil:
					fmt.Fprintln(cmd.OutOrStdout(), r.Sandbox.SandboxID)
				case r.Error != nil:
					errs = append(errs, fmt.Errorf("fork %d: %s", i+1, r.Error.Message))
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "number of copies")
	cmd.Flags().IntVar(&timeout, "timeout", 300, "seconds until the copies expire")
	return cmd
}

// forEachSandbox runs op on every id, prints the ids it succeeded for and
// returns the failures joined (a 404 as "sandbox <id> not found").
func forEachSandbox(cmd *cobra.Command, ids []string, op func(c *airlock.Client, id string) error) error {
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := op(c, id); err != nil {
			errs = append(errs, explain(id, err))
			continue
		}
		fmt.Fprintln(cmd.OutOrStdout(), id)
	}
	return errors.Join(errs...)
}

// explain turns a 404 into a short message.
func explain(id string, err error) error {
	if airlock.IsNotFound(err) {
		return fmt.Errorf("sandbox %s not found", id)
	}
	return err
}

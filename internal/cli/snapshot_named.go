package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func init() {
	register(func(root *cobra.Command) {
		sc := &cobra.Command{
			Use:     "snapshot",
			Aliases: []string{"snapshots", "snap"},
			Short:   "Named snapshots of sandboxes (memory + disk); create sandboxes from them with --template <id|name>",
		}
		sc.AddCommand(newSnapshotCreateCmd(), newSnapshotListCmd(), newSnapshotRmCmd())
		root.AddCommand(sc)
	})
}

func newSnapshotCreateCmd() *cobra.Command {
	var (
		name   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create <sandbox-id>",
		Short: "Snapshot a running sandbox (it keeps running); prints the snapshot id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			s, err := c.CreateSnapshot(cmd.Context(), args[0], name)
			if err != nil {
				return explain(args[0], err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), s)
			}
			fmt.Fprintln(cmd.OutOrStdout(), s.SnapshotID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the snapshot (moves from an older snapshot with that name)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSnapshotListCmd() *cobra.Command {
	var (
		sandboxID string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List snapshots with their disk usage",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			ss, err := c.ListSnapshots(cmd.Context(), sandboxID)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ss)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SNAPSHOT\tNAME\tSANDBOX\tTEMPLATE\tSIZE\tCREATED\tSTATUS")
			var total int64
			for _, s := range ss {
				total += s.SizeBytes
				status := "ok"
				if s.Problem != "" {
					status = "invalid: " + s.Problem
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.SnapshotID, firstNonEmpty(strings.Join(s.Names, ","), "-"),
					firstNonEmpty(s.SandboxID, "-"), firstNonEmpty(s.TemplateID, "-"), humanize.IBytes(uint64(max(s.SizeBytes, 0))),
					s.CreatedAt.Local().Format(time.DateTime), status)
			}
			if err := tw.Flush(); err != nil {
				return fmt.Errorf("writing table: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d snapshot(s), %s on disk\n", len(ss), humanize.IBytes(uint64(max(total, 0))))
			return nil
		},
	}
	cmd.Flags().StringVar(&sandboxID, "sandbox", "", "only snapshots taken from this sandbox")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSnapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm <id|name>...",
		Aliases: []string{"delete"},
		Short:   "Delete snapshots (sandboxes created from them are not affected)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			var errs []error
			for _, ref := range args {
				if err := c.DeleteSnapshot(cmd.Context(), ref); err != nil {
					if airlock.IsNotFound(err) {
						err = fmt.Errorf("snapshot %s not found", ref)
					}
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), ref)
			}
			return errors.Join(errs...)
		},
	}
}

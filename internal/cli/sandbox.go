package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func init() {
	register(func(root *cobra.Command) {
		sb := &cobra.Command{
			Use:     "sandbox",
			Aliases: []string{"sandboxes", "sb"},
			Short:   "Create, list, inspect and kill sandboxes",
		}
		sb.AddCommand(newCreateCmd(), newListCmd(), newInfoCmd(), newKillCmd(), newTimeoutCmd(), newPauseCmd(), newResumeCmd(), newForkCmd())
		// Top-level shortcuts: airlock create|ls|info|kill.
		root.AddCommand(sb, newCreateCmd(), newListCmd(), newInfoCmd(), newKillCmd())
	})
}

func newCreateCmd() *cobra.Command {
	var (
		template   string
		timeout    int
		metadata   []string
		envs       []string
		noInternet bool
		asJSON     bool
		volumes    []string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			meta, err := parseKV("metadata", metadata)
			if err != nil {
				return err
			}
			env, err := parseKV("env", envs)
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout must be positive, got %d", timeout)
			}
			mounts, err := parseVolumeFlags(volumes)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			opts := airlock.SandboxOptions{Template: template, Timeout: time.Duration(timeout) * time.Second, Metadata: meta, Envs: env, VolumeMounts: mounts}
			if noInternet {
				f := false
				opts.AllowInternet = &f
			}
			sb, err := c.CreateSandbox(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb.Info)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&template, "template", "t", "base", "template name")
	f.IntVar(&timeout, "timeout", 300, "seconds until the sandbox is killed")
	f.StringArrayVarP(&metadata, "metadata", "m", nil, "metadata key=value (repeatable)")
	f.StringArrayVarP(&envs, "env", "e", nil, "default environment variable KEY=VALUE (repeatable)")
	f.BoolVar(&noInternet, "no-internet", false, "deny outbound internet access")
	f.StringArrayVar(&volumes, "volume", nil, "mount a volume: NAME:/path[:ro] (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the full sandbox object as JSON")
	return cmd
}

func newListCmd() *cobra.Command {
	var (
		states   []string
		metadata []string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			meta, err := parseKV("metadata", metadata)
			if err != nil {
				return err
			}
			for _, s := range states {
				if s != "running" && s != "paused" {
					return fmt.Errorf("--state %q: want running or paused", s)
				}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListAllSandboxes(cmd.Context(), airlock.ListOpts{State: states, Metadata: meta})
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []airlock.ListedSandbox{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			return printSandboxTable(cmd.OutOrStdout(), list, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "filter by state: running,paused (default both)")
	f.StringArrayVarP(&metadata, "metadata", "m", nil, "filter by metadata key=value (repeatable, all must match)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printSandboxTable(w io.Writer, list []airlock.ListedSandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX ID\tTEMPLATE\tSTATE\tSTARTED\tENDS IN\tCPU\tMEMORY\tMETADATA")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d MiB\t%s\n",
			s.SandboxID, firstNonEmpty(s.Alias, s.TemplateID), s.State,
			s.StartedAt.Local().Format(time.DateTime), until(now, s.EndAt),
			s.CPUCount, s.MemoryMB, formatKV(s.Metadata))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

func until(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return "expired"
	}
	return d.String()
}

func formatKV(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func newInfoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info <id>",
		Short: "Show one sandbox (--json includes its envd access token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			d, err := c.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), d)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
			row("Sandbox ID", d.SandboxID)
			row("Template", d.TemplateID)
			if d.Alias != "" {
				row("Alias", d.Alias)
			}
			row("State", d.State)
			row("Started", d.StartedAt.Local().Format(time.RFC3339))
			row("Ends", d.EndAt.Local().Format(time.RFC3339)+" (in "+until(time.Now(), d.EndAt)+")")
			row("CPUs", strconv.Itoa(d.CPUCount))
			row("Memory", strconv.Itoa(d.MemoryMB)+" MiB")
			row("Disk", strconv.Itoa(d.DiskSizeMB)+" MiB")
			row("envd version", d.EnvdVersion)
			if d.AllowInternetAccess != nil {
				row("Internet", strconv.FormatBool(*d.AllowInternetAccess))
			}
			if d.Lifecycle != nil {
				row("On timeout", d.Lifecycle.OnTimeout)
			}
			row("Metadata", formatKV(d.Metadata))
			if err := tw.Flush(); err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newKillCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "kill <id>...",
		Aliases: []string{"rm"},
		Short:   "Kill sandboxes",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forEachSandbox(cmd, args, func(c *airlock.Client, id string) error {
				return c.KillSandbox(cmd.Context(), id)
			})
		},
	}
}

func newTimeoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "timeout <id> <seconds>",
		Short: "Set a sandbox's remaining lifetime, counted from now",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			secs, err := strconv.Atoi(args[1])
			if err != nil || secs <= 0 {
				return fmt.Errorf("seconds %q: want a positive integer", args[1])
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return c.SetTimeout(cmd.Context(), args[0], secs)
		},
	}
}

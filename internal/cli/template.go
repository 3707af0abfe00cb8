package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func init() {
	register(func(root *cobra.Command) {
		tc := &cobra.Command{
			Use:     "template",
			Aliases: []string{"templates", "tpl"},
			Short:   "List and build templates",
		}
		tc.AddCommand(newTemplateListCmd(), newTemplateBuildCmd(), newTemplateInfoCmd(), newTemplateRmCmd())
		root.AddCommand(tc)
	})
}

func newTemplateListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List templates",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			ts, err := c.ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if ts == nil {
					ts = []airlock.Template{}
				}
				return printJSON(cmd.OutOrStdout(), ts)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TEMPLATE\tTAGS\tALIASES\tBUILD\tSIZE\tCREATED")
			for _, t := range ts {
				size := "-"
				if t.SizeBytes > 0 {
					size = humanize.IBytes(uint64(t.SizeBytes))
				}
				created := "-"
				if !t.CreatedAt.IsZero() {
					created = t.CreatedAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.TemplateID, firstNonEmpty(strings.Join(t.Tags, ","), "-"), firstNonEmpty(strings.Join(t.Aliases, ","), "-"),
					firstNonEmpty(t.BuildID, "-"), size, created)
			}
			if err := tw.Flush(); err != nil {
				return fmt.Errorf("writing table: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTemplateBuildCmd() *cobra.Command {
	var (
		force  bool
		asJSON bool
		df     dockerfileFlags
	)
	cmd := &cobra.Command{
		Use:   "build [-f Dockerfile] [--name N] [flags] [context-dir | built-in-name]",
		Short: "Build a template from a Dockerfile (or a built-in template by name)",
		Long: `With a context directory, -f or --name: build a template from a Dockerfile on the
daemon. Every RUN step executes inside a sandbox; steps whose inputs did not change
are served from the layer cache. Without them: build (or rebuild with --force) a
built-in template such as "base".`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if df.wanted(cmd, args) {
				return runDockerfileBuild(cmd, c, df, args, asJSON)
			}
			if len(args) != 1 {
				return fmt.Errorf("template build: give a context directory (Dockerfile build) or a built-in template name")
			}
			errw := cmd.ErrOrStderr()
			tty := isTerminal(errw)
			var (
				bar   *progressbar.ProgressBar
				phase string
			)
			onProgress := func(p airlock.Progress) {
				if !tty {
					if p.Total > 0 {
						fmt.Fprintf(errw, "%s: %s (%d/%d)\n", p.Phase, p.Message, p.Done, p.Total)
					} else {
						fmt.Fprintf(errw, "%s: %s\n", p.Phase, p.Message)
					}
					return
				}
				if bar == nil || p.Phase != phase {
					if bar != nil {
						bar.Finish()
						fmt.Fprintln(errw)
					}
					phase = p.Phase
					total := p.Total
					if total <= 0 {
						total = -1 // spinner
					}
					bar = progressbar.NewOptions64(total,
						progressbar.OptionSetWriter(errw),
						progressbar.OptionSetDescription(p.Phase),
						progressbar.OptionThrottle(100*time.Millisecond))
				}
				bar.Describe(p.Phase + ": " + truncate(p.Message, 50))
				if p.Total > 0 {
					bar.Set64(p.Done)
				}
			}
			t, err := c.BuildTemplate(cmd.Context(), args[0], force, onProgress)
			if bar != nil {
				bar.Finish()
				fmt.Fprintln(errw)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "built template %s (build %s)\n", t.TemplateID, firstNonEmpty(t.BuildID, "-"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "rebuild even if the template exists (built-in templates)")
	df.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the built template as JSON")
	return cmd
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

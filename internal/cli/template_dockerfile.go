package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// dockerfileFlags are the flags of a Dockerfile build.
type dockerfileFlags struct {
	file      string
	name      string
	cpu       int
	memoryMB  int
	startCmd  string
	readyCmd  string
	noNetwork bool
	noCache   bool
	buildArgs []string
}

func (d *dockerfileFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&d.file, "file", "f", "", "Dockerfile path (default: <context-dir>/Dockerfile)")
	f.StringVar(&d.name, "name", "", "template name (default: the context directory's name)")
	f.IntVar(&d.cpu, "cpu", 0, "default vCPUs of sandboxes from this template")
	f.IntVar(&d.memoryMB, "memory-mb", 0, "default memory (MiB) of sandboxes from this template")
	f.StringVar(&d.startCmd, "start-cmd", "", "command started in the background in every new sandbox (default: ENTRYPOINT/CMD)")
	f.StringVar(&d.readyCmd, "ready-cmd", "", "command that must exit 0 before a new sandbox is handed out")
	f.BoolVar(&d.noNetwork, "no-network", false, "run RUN steps without internet access")
	f.BoolVar(&d.noCache, "no-cache", false, "do not use cached layers")
	f.StringArrayVar(&d.buildArgs, "build-arg", nil, "ARG value (KEY=VALUE, repeatable)")
}

// wanted reports whether the invocation is a Dockerfile build.
func (d *dockerfileFlags) wanted(cmd *cobra.Command, args []string) bool {
	if cmd.Flags().Changed("file") || cmd.Flags().Changed("name") {
		return true
	}
	if len(args) == 1 {
		if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

var nameCleanRE = regexp.MustCompile(`[^a-z0-9._-]+`)

func runDockerfileBuild(cmd *cobra.Command, c *airlock.Client, d dockerfileFlags, args []string, asJSON bool) error {
	ctxDir := "."
	if len(args) == 1 {
		ctxDir = args[0]
	}
	ctxDir, err := filepath.Abs(ctxDir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(ctxDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("context directory %s: not a directory", ctxDir)
	}
	name := d.name
	if name == "" {
		name = strings.Trim(nameCleanRE.ReplaceAllString(strings.ToLower(filepath.Base(ctxDir)), "-"), "-._")
	}
	opts := airlock.DockerfileBuild{
		CPUCount: d.cpu, MemoryMB: d.memoryMB, StartCmd: d.startCmd, ReadyCmd: d.readyCmd,
		NoNetwork: d.noNetwork, NoCache: d.noCache, BuildArgs: map[string]string{},
	}
	for _, kv := range d.buildArgs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--build-arg %q: want KEY=VALUE", kv)
		}
		opts.BuildArgs[k] = v
	}
	extraPath, extraName := "", ""
	file := d.file
	if file == "" {
		file = filepath.Join(ctxDir, "Dockerfile")
	}
	file, err = filepath.Abs(file)
	if err != nil {
		return err
	}
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("reading the Dockerfile: %w", err)
	}
	if rel, err := filepath.Rel(ctxDir, file); err == nil && !strings.HasPrefix(rel, "..") {
		opts.Dockerfile = filepath.ToSlash(rel)
	} else {
		extraPath, extraName = file, ".airlock-dockerfile"
		opts.Dockerfile = extraName
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(airlock.WriteContextTar(pw, ctxDir, extraPath, extraName)) }()
	defer pr.Close()

	errw := cmd.ErrOrStderr()
	onProgress := func(p airlock.Progress) {
		switch p.Phase {
		case "output":
			fmt.Fprintf(errw, "    %s\n", p.Message)
		default:
			fmt.Fprintln(errw, p.Message)
		}
	}
	t, err := c.BuildDockerfile(cmd.Context(), name, pr, opts, onProgress)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), t)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "built template %s (build %s, %s)\n", t.TemplateID, firstNonEmpty(t.BuildID, "-"), humanize.IBytes(uint64(max(t.SizeBytes, 0))))
	return nil
}

func newTemplateInfoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info <name>",
		Short: "Show a template's details",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			t, err := c.TemplateInfo(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), t)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "template:  %s\nbuild:     %s\nsize:      %s\ncpu:       %d\nmemory:    %d MiB\n",
				t.TemplateID, t.BuildID, humanize.IBytes(uint64(max(t.SizeBytes, 0))), t.CPUCount, t.MemoryMB)
			if cfg := t.Config; cfg != nil {
				fmt.Fprintf(w, "from:      %s\nuser:      %s\nworkdir:   %s\nstart cmd: %s\nready cmd: %s\nlayers:    %d\n",
					cfg.From, firstNonEmpty(cfg.User, "-"), firstNonEmpty(cfg.Workdir, "-"), firstNonEmpty(cfg.StartCmd, "-"),
					firstNonEmpty(cfg.ReadyCmd, "-"), len(cfg.Layers))
				for k, v := range cfg.Env {
					fmt.Fprintf(w, "env:       %s=%s\n", k, v)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTemplateRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm <name>...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove templates (refused while sandboxes use them)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			for _, n := range args {
				if err := c.RemoveTemplate(cmd.Context(), n); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed template %s\n", n)
			}
			return nil
		},
	}
}

package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func init() {
	register(func(root *cobra.Command) { root.AddCommand(newWatchCmd()) })
}

func newWatchCmd() *cobra.Command {
	var since uint64
	var types []string
	var asJSON, noFollow bool
	cmd := &cobra.Command{
		Use:   "watch <id>",
		Short: "Follow a sandbox's live activity feed (connections, DNS, processes, files)",
		Long: `Follow a sandbox's activity feed: the entries the daemon keeps (after
--since), then new ones as they happen, until interrupted. Each line is one
entry: its id, time, type and data. --json prints one JSON object a line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			q := airlock.ActivityQuery{Since: since, Types: types}
			out := cmd.OutOrStdout()
			print := func(e airlock.ActivityEntry) error {
				if asJSON {
					return json.NewEncoder(out).Encode(e)
				}
				_, err := fmt.Fprintln(out, formatActivity(e))
				return err
			}
			if noFollow {
				entries, err := c.Activity(cmd.Context(), args[0], q)
				if err != nil {
					return explain(args[0], err)
				}
				for _, e := range entries {
					if err := print(e); err != nil {
						return err
					}
				}
				return nil
			}
			if err := c.WatchActivity(cmd.Context(), args[0], q, print); err != nil {
				return explain(args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&since, "since", 0, "start after this entry id (default: every entry kept)")
	cmd.Flags().StringSliceVar(&types, "types", nil, `only these types ("egress", "process", "file.write", …)`)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	cmd.Flags().BoolVar(&noFollow, "no-follow", false, "print the kept entries and exit")
	return cmd
}

// formatActivity is one line: id, time, type, then data as key=value in
// key order.
func formatActivity(e airlock.ActivityEntry) string {
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%-6d %s %-15s", e.ID, e.Time.Local().Format("15:04:05.000"), e.Type)
	for _, k := range keys {
		v, _ := json.Marshal(e.Data[k])
		s := string(v)
		if str, ok := e.Data[k].(string); ok && !strings.ContainsAny(str, " \"=") {
			s = str
		}
		fmt.Fprintf(&b, " %s=%s", k, s)
	}
	return b.String()
}

package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

func init() {
	register(func(root *cobra.Command) {
		n := &cobra.Command{Use: "net", Short: "Sandbox network: egress audit log"}
		n.AddCommand(newNetLogCmd())
		root.AddCommand(n)
	})
}

func newNetLogCmd() *cobra.Command {
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "log <id>",
		Short: "Show a sandbox's outbound connection attempts and DNS decisions (oldest first)",
		Long: `Show a sandbox's egress audit log: every outbound connection attempt
(destination, protocol, allowed or denied and the rule that decided) and, for
sandboxes with domain rules, every DNS query (name, answers, allowed or
refused). Use it to learn which allowOut entries a program needs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			entries, dropped, err := c.EgressLog(cmd.Context(), args[0], limit)
			if err != nil {
				return explain(args[0], err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(entries)
			}
			printEgressLog(cmd, entries)
			if dropped > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "(%d older entries dropped: the daemon keeps the newest %d)\n", dropped, audit.DefaultSize)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show only the most recent N entries (default: all kept, up to 1000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printEgressLog(cmd *cobra.Command, entries []audit.Entry) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDECISION\tDESTINATION\tRULE")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.TimeOnly+".000"), e.Kind, e.Decision, destination(e), e.Rule)
	}
	tw.Flush()
}

// destination renders where an entry went: "tcp 192.0.2.7:443" or
// "example.com A → 192.0.2.7".
func destination(e audit.Entry) string {
	if e.Kind == audit.KindDNS {
		s := e.Name + " " + e.QType
		if len(e.Answers) > 0 {
			var as []string
			for _, a := range e.Answers {
				as = append(as, a.String())
			}
			s += " → " + strings.Join(as, ",")
		}
		return s
	}
	if e.Kind == audit.KindPolicy {
		return "-" // the rule says which entry
	}
	dst := e.Dst.String()
	if e.Port != 0 {
		dst = net.JoinHostPort(dst, strconv.Itoa(int(e.Port)))
	}
	return e.Protocol + " " + dst
}

package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

func init() {
	register(func(root *cobra.Command) {
		cc := &cobra.Command{
			Use:   "cluster",
			Short: "Certificates of an Airlock cluster: the CA the api tier and the nodes authenticate each other with",
		}
		ca := &cobra.Command{Use: "ca", Short: "The cluster CA"}
		ca.AddCommand(newClusterCAInitCmd())
		cc.AddCommand(ca, newClusterCertCmd())
		root.AddCommand(cc)
	})
}

func newClusterCAInitCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make a new cluster CA (ca.crt, and ca.key which stays with the operator)",
		Long: `Make a new cluster CA in --dir: ca.crt (every node and api instance gets a
copy) and ca.key (0600: keep it off the nodes and api instances; it only issues
certificates with "airlock cluster cert"). An existing CA is never replaced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--dir is required")
			}
			if _, err := clustertls.Init(dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster CA written to %s (%s, %s)\n", dir, clustertls.CACert, clustertls.CAKey)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the new CA")
	return cmd
}

func newClusterCertCmd() *cobra.Command {
	var caDir, nodeID, out string
	var addrs []string
	var api bool
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Issue a node's or the api tier's certificate into a TLS directory (--cluster-tls-dir)",
		Long: `Issue a certificate from the cluster CA in --ca and write a TLS directory for
"airlock serve --cluster-tls-dir": ca.crt plus node.crt/node.key (--node ID: the
node's identity, airlock:node:ID, for server authentication; --addr adds the
host of its advertise address as a DNS or IP name) or api.crt/api.key (--api:
the api tier's identity, airlock:api, for client authentication).`,
		Example: `  airlock cluster ca init --dir ./ca
  airlock cluster cert --ca ./ca --node n1 --addr 10.0.0.11:49982 --out ./n1-tls
  airlock cluster cert --ca ./ca --api --out ./api-tls`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if caDir == "" || out == "" {
				return errors.New("--ca and --out are required")
			}
			if api == (nodeID != "") {
				return errors.New("give either --node ID or --api")
			}
			ca, err := clustertls.LoadCA(caDir)
			if err != nil {
				return err
			}
			var crt, key []byte
			crtName, keyName := clustertls.APICrt, clustertls.APIKey
			if api {
				if len(addrs) > 0 {
					return errors.New("--addr is for a node's certificate")
				}
				crt, key, err = ca.IssueAPI()
			} else {
				var hosts []string
				for _, a := range addrs {
					h, _, err := net.SplitHostPort(a)
					if err != nil {
						h = a
					}
					hosts = append(hosts, h)
				}
				crtName, keyName = clustertls.NodeCrt, clustertls.NodeKey
				crt, key, err = ca.IssueNode(nodeID, hosts)
			}
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return fmt.Errorf("creating %s: %w", out, err)
			}
			for _, f := range []struct {
				name string
				data []byte
				mode os.FileMode
			}{{clustertls.CACert, ca.CertPEM(), 0o644}, {crtName, crt, 0o644}, {keyName, key, 0o600}} {
				if err := clustertls.WriteFile(filepath.Join(out, f.name), f.data, f.mode); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s to %s\n", clustertls.CACert, crtName, keyName, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca", "", "directory of the cluster CA (airlock cluster ca init)")
	f.StringVar(&nodeID, "node", "", "issue node ID's certificate (its --node-id)")
	f.StringSliceVar(&addrs, "addr", nil, "a node's advertise address (host:port or host), for its DNS/IP names; repeatable")
	f.BoolVar(&api, "api", false, "issue the api tier's certificate")
	f.StringVar(&out, "out", "", "TLS directory to write (ca.crt and the certificate and key)")
	return cmd
}

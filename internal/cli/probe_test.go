package cli

import "github.com/spf13/cobra"

// newProbe is a test-only command that records the resolved configuration.
func newProbe(dst *Config) *cobra.Command {
	return &cobra.Command{
		Use: "probe",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := resolveConfig(cmd)
			*dst = c
			return err
		},
	}
}

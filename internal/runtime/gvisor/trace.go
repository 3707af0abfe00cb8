//go:build linux

package gvisor

// traceArgs are the global runsc flags that start the activity feed's
// trace session (gVisor runtime monitoring, internal/activity's Tracer) in
// a sandbox that subcommand sub starts: "run" and "restore" create the
// sandbox process, which connects to the tracer's socket. Other
// subcommands get none.
func (r *Runtime) traceArgs(sub string) []string {
	if r.podInit == "" || (sub != "run" && sub != "restore" && sub != "create") {
		return nil
	}
	return []string{"--pod-init-config", r.podInit}
}

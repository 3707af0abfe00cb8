//go:build !linux

package sandbox

// urgentThread does nothing off Linux (killprio_linux.go).
func urgentThread() {}

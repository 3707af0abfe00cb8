//go:build !linux

package main

// runChild does nothing off Linux: only the daemon re-executes the binary.
func runChild() {}

//go:build !unix

package cli

import "os"

// notifyWinch delivers nothing where the system has no SIGWINCH: the shell
// keeps the size it started with.
func notifyWinch(chan<- os.Signal) func() { return func() {} }

//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyWinch delivers SIGWINCH to c until the returned stop is called.
func notifyWinch(c chan<- os.Signal) func() {
	signal.Notify(c, syscall.SIGWINCH)
	return func() { signal.Stop(c) }
}

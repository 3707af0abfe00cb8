// Command airlock is the Airlock daemon (`airlock serve`) and CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/cli"
)

func main() {
	runChild()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli.Execute(ctx)
}

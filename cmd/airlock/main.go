// Command airlock is the Airlock daemon (`airlock serve`) and CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/imagebuild"
)

func main() {
	// A re-exec of this binary as the unprivileged reader of a microVM's
	// disk (internal/imagebuild DiskSource) never reaches the CLI.
	imagebuild.DiffDisksChild()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli.Execute(ctx)
}

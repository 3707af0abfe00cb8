//go:build linux

// Command mkvol makes (or, with -rm, deletes) a loop volume in a daemon's
// data dir with internal/volume.Loop, as the node's Backing would: the
// volumes bench runs before the volume API is there to call.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/volume"
)

func main() {
	data := flag.String("data-dir", "", "the daemon's --data-dir")
	id := flag.String("id", "", "volume id")
	sizeMB := flag.Int64("size-mb", 2048, "volume size in MiB")
	rm := flag.Bool("rm", false, "delete the volume")
	flag.Parse()
	ctx := context.Background()
	b, err := volume.OpenLoop(ctx, filepath.Join(*data, "volumes"), "", nil)
	if err != nil {
		log.Fatal(err)
	}
	if *rm {
		if err := b.Delete(ctx, *id); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := b.Create(ctx, *id, *sizeMB<<20); err != nil {
		log.Fatal(err)
	}
	dir, err := b.Dir(ctx, *id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dir)
}

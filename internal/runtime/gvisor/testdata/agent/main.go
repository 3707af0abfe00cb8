// Command agent is a tiny stand-in for airlock-envd used by the gvisor
// runtime tests: it serves /health and /run?cmd=... on :49983, and with
// "-hog N" allocates and touches N MiB of memory.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-hog" {
		hog(os.Args[2])
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "-spawn" {
		spawn(os.Args[2])
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/run", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "/bin/sh", "-c", r.URL.Query().Get("cmd")).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
			out = append(out, err.Error()...)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"exit": code, "output": string(out)})
	})
	log.Fatal(http.ListenAndServe(":"+strconv.Itoa(guest.EnvdPort), mux))
}

func hog(mbs string) {
	mb, err := strconv.Atoi(mbs)
	if err != nil {
		log.Fatal(err)
	}
	var keep [][]byte
	for i := 0; i < mb; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	fmt.Printf("allocated %d MiB\n", len(keep))
}

// spawn starts n "sleep 1" children, reports how many could not be
// started, and waits for the others (so none is left as an orphan).
func spawn(ns string) {
	n, err := strconv.Atoi(ns)
	if err != nil {
		log.Fatal(err)
	}
	var started []*exec.Cmd
	failed := 0
	var firstErr error
	for i := 0; i < n; i++ {
		c := exec.Command("/bin/sleep", "1")
		if err := c.Start(); err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		started = append(started, c)
	}
	for _, c := range started {
		_ = c.Wait()
	}
	fmt.Printf("started %d failed %d: %v\n", len(started), failed, firstErr)
}

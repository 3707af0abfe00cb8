// Command quickstart is a tour of the public Go SDK, built as a program
// outside the Airlock module would build it (its own go.mod; the replace
// directive points at this checkout instead of a published version). It
//
//  1. creates a code-interpreter sandbox,
//  2. runs a shell command and streams its output as it comes,
//  3. runs a Python cell that draws a chart and reads the chart's data,
//  4. uploads a file and downloads it again,
//  5. pauses the sandbox and resumes it, and checks that a value set
//     before the pause survived it,
//
// then kills the sandbox. It reads the daemon's address and API key from
// AIRLOCK_URL / AIRLOCK_API_KEY (or E2B_API_URL / E2B_API_KEY), prints what
// it does, and exits non-zero at the first step that fails.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/agentwire"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

func main() {
	template := flag.String("template", "code-interpreter-v1", "template of the sandbox (it needs the code interpreter)")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	log.SetFlags(0)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, airlock.FromEnv(), *template, os.Stdout); err != nil {
		log.Fatalf("quickstart: %v", err)
	}
}

func run(ctx context.Context, c *airlock.Client, template string, out io.Writer) (err error) {
	// 1. A sandbox.
	sbx, err := c.CreateSandbox(ctx, airlock.SandboxOptions{Template: template, Timeout: 5 * time.Minute,
		Metadata: map[string]string{"example": "quickstart"}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "created sandbox %s (template %s)\n", sbx.ID, sbx.TemplateID)
	defer func() {
		if kerr := sbx.Kill(context.WithoutCancel(ctx)); kerr != nil {
			err = errors.Join(err, fmt.Errorf("killing %s: %w", sbx.ID, kerr))
		}
	}()

	// 2. A command whose output arrives as it is written: the request
	// types are the generated processpb ones, the stream reader is
	// agentwire's.
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd:  "/bin/sh",
		Args: []string{"-c", "for i in 1 2 3; do echo line $i; sleep 0.2; done; echo done >&2"},
	}})
	req.Header().Set("Authorization", agentwire.BasicAuth("user"))
	stream, err := c.Process(sbx.ID, sbx.AccessToken).Start(ctx, req)
	if err != nil {
		return fmt.Errorf("starting a command: %w", err)
	}
	var stdout strings.Builder
	end, err := agentwire.Receive(stream, agentwire.Events{
		Start: func(pid uint32) error { fmt.Fprintf(out, "command started, pid %d\n", pid); return nil },
		Data: func(o, e, _ []byte) error {
			stdout.Write(o)
			for line := range strings.Lines(string(o) + string(e)) {
				fmt.Fprintf(out, "  | %s", line)
			}
			return nil
		},
	})
	stream.Close()
	if err != nil {
		return fmt.Errorf("reading the command's output: %w", err)
	}
	if end.GetExitCode() != 0 || stdout.String() != "line 1\nline 2\nline 3\n" {
		return fmt.Errorf("command: exit %d, stdout %q", end.GetExitCode(), stdout.String())
	}
	fmt.Fprintf(out, "command exited %d\n", end.GetExitCode())

	// 3. A cell that draws a chart: the PNG and the chart's data.
	exec, err := sbx.RunCode(ctx, "import matplotlib.pyplot as plt\n"+
		"plt.plot([1, 2, 3], [1, 4, 9], label='squares')\nplt.title('Squares')\nplt.show()\n"+
		"secret = 42\n")
	if err != nil {
		return fmt.Errorf("running a cell: %w", err)
	}
	if exec.Error != nil {
		return fmt.Errorf("the cell failed: %w", exec.Error)
	}
	var chart map[string]any
	for _, r := range exec.Results {
		if r.PNG != "" && r.Chart != nil {
			chart = r.Chart
		}
	}
	if chart == nil || chart["type"] != "line" || chart["title"] != "Squares" {
		return fmt.Errorf("the cell's results hold no line chart titled Squares: %+v", exec.Results)
	}
	fmt.Fprintf(out, "cell drew a %v chart %q with %d series\n", chart["type"], chart["title"], len(chart["elements"].([]any)))

	// 4. A file up and down again.
	content := []byte("hello from the Go SDK\n")
	info, err := c.Upload(ctx, sbx.ID, sbx.AccessToken, "/home/user/hello.txt", bytes.NewReader(content))
	if err != nil {
		return err
	}
	body, err := c.Download(ctx, sbx.ID, sbx.AccessToken, info.Path)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		return fmt.Errorf("downloading %s: %w", info.Path, err)
	}
	if !bytes.Equal(got, content) {
		return fmt.Errorf("downloaded %q from %s, uploaded %q", got, info.Path, content)
	}
	fmt.Fprintf(out, "uploaded and downloaded %s (%d bytes)\n", info.Path, len(got))

	// 5. Pause (memory and disk kept), resume, and the kernel's state is
	// still there.
	if err := c.PauseSandbox(ctx, sbx.ID); err != nil {
		return err
	}
	d, err := c.GetSandbox(ctx, sbx.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "paused: state %s\n", d.State)
	if _, err := c.ResumeSandbox(ctx, sbx.ID, 300); err != nil {
		return err
	}
	exec, err = sbx.RunCode(ctx, "secret")
	if err != nil {
		return fmt.Errorf("running a cell after the resume: %w", err)
	}
	if exec.Text() != "42" {
		return fmt.Errorf("after the resume the cell's variable is %q, want 42", exec.Text())
	}
	fmt.Fprintf(out, "resumed: the cell's variable is still %s\n", exec.Text())
	return nil
}

package template

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

func TestOutputParserRealLog(t *testing.T) {
	f, err := os.Open("testdata/mmdebstrap-verbose.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Progress
	p := newOutputParser(func(pr Progress) { got = append(got, pr) })
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p.line(sc.Text())
	}
	// Phases appear in order, each at least once.
	order := []string{PhaseDownload, PhaseExtract, PhaseInstall, PhaseCustomize, PhaseFinalize}
	idx := 0
	for _, pr := range got {
		for idx < len(order) && pr.Phase != order[idx] {
			idx++
		}
		if idx == len(order) {
			t.Fatalf("phase %q out of order", pr.Phase)
		}
	}
	seen := map[string]bool{}
	var lastDownload, lastInstall Progress
	for _, pr := range got {
		seen[pr.Phase] = true
		if pr.Done > pr.Total && pr.Total > 0 {
			t.Fatalf("Done > Total: %+v", pr)
		}
		switch pr.Phase {
		case PhaseDownload:
			lastDownload = pr
		case PhaseInstall:
			lastInstall = pr
		}
	}
	for _, ph := range order {
		if !seen[ph] {
			t.Errorf("phase %s never reported", ph)
		}
	}
	// The fixture downloads 69 essential packages and installs 69+81.
	if lastDownload.Total != 69 || lastDownload.Done != 69 {
		t.Errorf("last download progress %+v, want 69/69", lastDownload)
	}
	if lastInstall.Total != 150 || lastInstall.Done != 150 {
		t.Errorf("last install progress %+v, want 150/150", lastInstall)
	}
}

func TestLineProgress(t *testing.T) {
	var buf bytes.Buffer
	fn := TerminalProgress(&buf) // not a TTY: plain lines
	fn(Progress{Phase: PhaseDownload, Message: "updating package lists"})
	fn(Progress{Phase: PhaseDownload, Message: "fetched a", Done: 1, Total: 3}) // throttled
	fn(Progress{Phase: PhaseDownload, Message: "fetched c", Done: 3, Total: 3}) // complete
	fn(Progress{Phase: PhaseInstall, Message: "set up a", Done: 1, Total: 2})
	want := "[download] updating package lists\n[download] (3/3) fetched c\n[install] (1/2) set up a\n"
	if buf.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestBarProgressRenders(t *testing.T) {
	var buf bytes.Buffer
	fn := barProgress(&buf)
	fn(Progress{Phase: PhaseInstall, Message: "set up a", Done: 1, Total: 4})
	time.Sleep(150 * time.Millisecond) // let the throttle pass
	fn(Progress{Phase: PhaseInstall, Message: "set up d", Done: 4, Total: 4})
	fn(Progress{Phase: PhaseFinalize, Message: "done"})
	out := buf.String()
	if !strings.Contains(out, "[install]") || !strings.Contains(out, "4/4") {
		t.Fatalf("bar output lacks phase or count: %q", out)
	}
}

func TestTerminalProgressOnTTY(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	got := make(chan string, 1)
	go func() {
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, ptmx) // ends when the tty side is closed
		got <- buf.String()
	}()
	fn := TerminalProgress(tty)
	fn(Progress{Phase: PhaseInstall, Message: "set up a", Done: 1, Total: 69})
	fn(Progress{Phase: PhaseInstall, Message: "set up b", Done: 70, Total: 150})
	time.Sleep(150 * time.Millisecond)
	fn(Progress{Phase: PhaseInstall, Message: "set up z", Done: 150, Total: 150})
	fn(Progress{Phase: PhaseFinalize, Message: "done"})
	tty.Close()
	var out string
	select {
	case out = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("reading pty timed out")
	}
	// A bar redraws in place with carriage returns and shows counts; the
	// plain-line renderer would print "[install] (1/69) ..." lines instead.
	if !strings.Contains(out, "\r") || !strings.Contains(out, "150/150") {
		t.Fatalf("no progress bar on the TTY: %q", out)
	}
	if strings.Contains(out, "(1/69)") {
		t.Fatalf("plain lines on a TTY: %q", out)
	}
}

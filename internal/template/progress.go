package template

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Build phases reported through Progress.Phase, in order.
const (
	PhaseDownload  = "download"
	PhaseExtract   = "extract"
	PhaseInstall   = "install"
	PhaseCustomize = "customize"
	PhaseFinalize  = "finalize"
)

// Progress is one build progress report. Done and Total count packages in
// the download and install phases; Total is 0 when unknown.
type Progress struct {
	Phase   string
	Message string
	Done    int64
	Total   int64
}

// TerminalProgress returns a progress callback that renders a progress bar
// on w when w is a terminal and plain "[phase] message" lines otherwise
// (throttled to phase changes, completions and one line every two seconds).
func TerminalProgress(w io.Writer) func(Progress) {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return barProgress(w)
	}
	return lineProgress(w, 2*time.Second)
}

func lineProgress(w io.Writer, every time.Duration) func(Progress) {
	var (
		mu        sync.Mutex
		lastPhase string
		lastAt    time.Time
	)
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		complete := p.Total > 0 && p.Done == p.Total
		if p.Phase == lastPhase && !complete && now.Sub(lastAt) < every {
			return
		}
		lastPhase, lastAt = p.Phase, now
		if p.Total > 0 {
			fmt.Fprintf(w, "[%s] (%d/%d) %s\n", p.Phase, p.Done, p.Total, p.Message)
		} else {
			fmt.Fprintf(w, "[%s] %s\n", p.Phase, p.Message)
		}
	}
}

func barProgress(w io.Writer) func(Progress) {
	var (
		mu    sync.Mutex
		bar   *progressbar.ProgressBar
		phase string
		total int64
	)
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if bar != nil && p.Phase == phase && p.Total != total && p.Total > 0 {
			bar.ChangeMax64(p.Total)
			total = p.Total
		}
		if bar == nil || p.Phase != phase {
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(w)
			}
			max := p.Total
			if max <= 0 {
				max = -1 // spinner
			}
			bar = progressbar.NewOptions64(max,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetWidth(30),
				progressbar.OptionShowCount(),
				progressbar.OptionSetElapsedTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionSetDescription(fmt.Sprintf("[%s]", p.Phase)),
			)
			phase, total = p.Phase, p.Total
		}
		msg := p.Message
		if len(msg) > 40 {
			msg = msg[:40]
		}
		bar.Describe(fmt.Sprintf("[%s] %-40s", p.Phase, msg))
		if p.Total > 0 {
			_ = bar.Set64(p.Done)
		} else {
			_ = bar.Add(1)
		}
		if p.Phase == PhaseFinalize && p.Message == "done" {
			_ = bar.Finish()
			fmt.Fprintln(w)
			bar = nil
		}
	}
}

var (
	reNewlyInstalled = regexp.MustCompile(`(\d+) newly installed`)
	reGet            = regexp.MustCompile(`^Get:\d+ \S+ \S+ \S+ (\S+) `)
	reSettingUp      = regexp.MustCompile(`^Setting up (\S+)`)
	reUnpacking      = regexp.MustCompile(`^Unpacking (\S+)`)
)

// outputParser turns mmdebstrap --verbose output lines into Progress
// reports. It is not safe for concurrent use.
type outputParser struct {
	emit func(Progress)

	phase       string
	downloading bool  // apt is fetching .debs (not indexes)
	downloadTot int64 // packages in the first (essential) download
	downloaded  int64
	installTot  int64 // packages to set up, across both apt runs
	installed   int64
}

func newOutputParser(emit func(Progress)) *outputParser {
	return &outputParser{emit: emit}
}

func (p *outputParser) send(phase, msg string, done, total int64) {
	p.phase = phase
	if p.emit != nil {
		p.emit(Progress{Phase: phase, Message: msg, Done: done, Total: total})
	}
}

// line consumes one output line.
func (p *outputParser) line(l string) {
	l = strings.TrimRight(l, "\r\n ")
	if msg, ok := strings.CutPrefix(l, "I: "); ok {
		p.info(msg)
		return
	}
	if m := reNewlyInstalled.FindStringSubmatch(l); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if p.phase == PhaseDownload && p.downloading && p.downloadTot == 0 {
			p.downloadTot = n
		}
		p.installTot += n
		return
	}
	if m := reGet.FindStringSubmatch(l); m != nil && p.downloading && p.phase == PhaseDownload {
		p.downloaded++
		p.send(PhaseDownload, "fetched "+m[1], min(p.downloaded, p.downloadTot), p.downloadTot)
		return
	}
	if m := reUnpacking.FindStringSubmatch(l); m != nil && p.phase == PhaseInstall {
		p.send(PhaseInstall, "unpacking "+m[1], p.installed, p.installTot)
		return
	}
	if m := reSettingUp.FindStringSubmatch(l); m != nil && p.phase == PhaseInstall {
		p.installed++
		p.send(PhaseInstall, "set up "+m[1], min(p.installed, p.installTot), p.installTot)
	}
}

func (p *outputParser) info(msg string) {
	switch {
	case strings.HasPrefix(msg, "running apt-get update"):
		p.send(PhaseDownload, "updating package lists", 0, 0)
	case strings.HasPrefix(msg, "downloading packages"):
		p.downloading = true
		p.send(PhaseDownload, "downloading packages", 0, 0)
	case strings.HasPrefix(msg, "extracting archives"):
		p.downloading = false
		p.send(PhaseExtract, "extracting essential packages", 0, 0)
	case strings.HasPrefix(msg, "installing essential"):
		p.send(PhaseInstall, "installing essential packages", p.installed, p.installTot)
	case strings.HasPrefix(msg, "installing remaining"):
		p.send(PhaseInstall, "installing remaining packages", p.installed, p.installTot)
	case strings.HasPrefix(msg, "running --customize-hook"), strings.HasPrefix(msg, "running special hook"):
		if p.phase != PhaseCustomize {
			p.send(PhaseCustomize, "configuring the root filesystem", 0, 0)
		}
	case strings.HasPrefix(msg, "cleaning package lists"):
		p.send(PhaseFinalize, "cleaning package lists and caches", 0, 0)
	}
}

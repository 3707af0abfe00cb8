package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const agentLogSample = `{"time":"2026-11-22T08:00:01.5Z","level":"INFO","msg":"listening","addr":":49983"}
{"time":"2026-11-22T08:00:02Z","level":"INFO","msg":"process started","pid":42,"cmd":"/bin/bash","user":"user","tag":""}
[    1.234] some kernel line
not json {
{"time":"2026-11-22T08:00:03Z","level":"INFO","msg":"process ended","pid":42,"status":"exit status 0"}
[    2.000] console prefix {"time":"2026-11-22T08:00:04Z","level":"INFO","msg":"process started","pid":43,"cmd":"sleep"}
{"time":"bad","level":"INFO","msg":"process started","pid":44}
`

func TestParseAgentEvents(t *testing.T) {
	es := parseAgentEvents([]byte(agentLogSample))
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(es), es)
	}
	if es[0].Message != "process started" || es[0].Fields["pid"] != "42" || es[0].Fields["cmd"] != "/bin/bash" ||
		es[0].Fields["source"] != "agent" || es[0].Level != "info" {
		t.Errorf("first entry %+v", es[0])
	}
	if es[1].Message != "process ended" || es[1].Fields["status"] != "exit status 0" {
		t.Errorf("second entry %+v", es[1])
	}
	if es[2].Fields["cmd"] != "sleep" {
		t.Errorf("an entry after a console prefix %+v", es[2])
	}
}

func TestReadTailDropsPartialLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.log")
	if err := os.WriteFile(p, []byte(agentLogSample), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := readTail(f, 120)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 120 || strings.HasPrefix(string(data), `"`) || !strings.HasPrefix(string(data), "{") {
		t.Fatalf("tail %q", data)
	}
	all, _ := readTail(f, 1<<20)
	if string(all) != agentLogSample {
		t.Fatal("a tail larger than the file is the whole file")
	}
}

func TestMergeEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	d := []LogEntry{{Time: t0, Message: "sandbox created"}, {Time: t0.Add(3 * time.Second), Message: "sandbox killed"}}
	a := []LogEntry{{Time: t0.Add(time.Second), Message: "process started"}, {Time: t0.Add(2 * time.Second), Message: "process ended"}}
	var got []string
	for _, e := range mergeEvents(d, a) {
		got = append(got, e.Message)
	}
	if strings.Join(got, "|") != "sandbox created|process started|process ended|sandbox killed" {
		t.Fatalf("merged %v", got)
	}
}

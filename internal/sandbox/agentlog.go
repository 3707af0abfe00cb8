package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Process lifecycle events in the sandbox logs come from the agent's own
// log, which runtimes keep on the host (runtime.AgentLogger): the agent
// writes JSON lines ("process started" with pid, cmd, user, tag; "process
// ended" with pid and status). Only its tail is read, so a long-lived
// sandbox shows its most recent processes. The agent runs inside the
// sandbox: these entries carry source=agent and say what the sandbox's agent
// reported, nothing the daemon checked.

// agentLogTail is how much of the end of the agent's log is read.
const agentLogTail = 1 << 20

// agentEventMessages are the agent log messages that become sandbox log
// entries.
var agentEventMessages = map[string]bool{"process started": true, "process ended": true}

// agentEvents reads the process events of the sandbox whose runtime
// directory is dir. A missing or unreadable log gives none.
func (m *Manager) agentEvents(dir string) []LogEntry {
	al := m.caps.AgentLogger
	if al == nil {
		return nil
	}
	f, err := os.Open(al.AgentLog(dir))
	if err != nil {
		return nil
	}
	defer f.Close()
	data, err := readTail(f, agentLogTail)
	if err != nil {
		m.log.Debug("reading agent log", "dir", dir, "err", err)
		return nil
	}
	return parseAgentEvents(data)
}

// readTail reads the last n bytes of f, dropping a first partial line.
func readTail(f *os.File, n int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(st.Size()-n, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return nil, err
	}
	if off > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		} else {
			data = nil
		}
	}
	return data, nil
}

// parseAgentEvents turns the agent's JSON log lines into entries; other
// lines (kernel console output, other messages, junk) are skipped.
func parseAgentEvents(data []byte) []LogEntry {
	var out []LogEntry
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if i := bytes.IndexByte(line, '{'); i > 0 {
			line = line[i:] // a console prefix
		}
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		msg, _ := rec["msg"].(string)
		if !agentEventMessages[msg] {
			continue
		}
		ts, _ := rec["time"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		level, _ := rec["level"].(string)
		fields := map[string]string{"source": "agent"}
		for k, v := range rec {
			switch k {
			case "time", "level", "msg":
				continue
			}
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				fields[k] = fmt.Sprint(int64(f))
			} else {
				fields[k] = fmt.Sprint(v)
			}
		}
		out = append(out, LogEntry{Time: at.UTC(), Level: strings.ToLower(level), Message: msg, Fields: fields})
	}
	return out
}

// mergeEvents merges the daemon's and the agent's entries by time (stable:
// equal times keep the daemon's first).
func mergeEvents(daemon, agent []LogEntry) []LogEntry {
	if len(agent) == 0 {
		return daemon
	}
	out := append(append(make([]LogEntry, 0, len(daemon)+len(agent)), daemon...), agent...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

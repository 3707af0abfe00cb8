//go:build linux

package activity

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// point encodes a trace message as gVisor's remote sink sends it.
func point(typ uint16, body []byte) []byte {
	h := make([]byte, 8)
	binary.LittleEndian.PutUint16(h[0:2], 8)
	binary.LittleEndian.PutUint16(h[2:4], typ)
	return append(h, body...)
}

func ctxData(container string, pid, ppid int32, uid uint32) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano()))
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(pid))
	b = protowire.AppendTag(b, 10, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(ppid))
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendString(b, container)
	var cred []byte
	cred = protowire.AppendTag(cred, 1, protowire.VarintType)
	cred = protowire.AppendVarint(cred, uint64(uid))
	b = protowire.AppendTag(b, 7, protowire.BytesType)
	b = protowire.AppendBytes(b, cred)
	return b
}

func TestTracerProcessEntries(t *testing.T) {
	h := New(nil, Options{})
	dir := t.TempDir()
	tr, err := StartTracer(h, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// The config names the socket and the points.
	raw, err := os.ReadFile(tr.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		TraceSession struct {
			Points []struct{ Name string } `json:"points"`
			Sinks  []struct {
				Name   string         `json:"name"`
				Config map[string]any `json:"config"`
			} `json:"sinks"`
		} `json:"trace_session"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil || len(conf.TraceSession.Sinks) != 1 || conf.TraceSession.Sinks[0].Config["endpoint"] != tr.path {
		t.Fatalf("config %s: %v", raw, err)
	}

	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: tr.path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)
	if _, err := c.Write(hs); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if v, ok := uintField(buf[:n], 1); err != nil || !ok || v != 1 {
		t.Fatalf("handshake answer %x: %v", buf[:n], err)
	}
	var exec []byte
	exec = protowire.AppendTag(exec, 1, protowire.BytesType)
	exec = protowire.AppendBytes(exec, ctxData("sb1", 42, 7, 1000))
	exec = protowire.AppendTag(exec, 2, protowire.BytesType)
	exec = protowire.AppendString(exec, "/usr/bin/sleep")
	for _, a := range []string{"sleep", "1"} {
		exec = protowire.AppendTag(exec, 3, protowire.BytesType)
		exec = protowire.AppendString(exec, a)
	}
	exit := func(pid int32, status uint32) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, ctxData("sb1", pid, 0, 0))
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(status))
	}
	for _, m := range [][]byte{point(msgExec, exec), point(msgExitNotifyParent, exit(43, 0)), point(msgExitNotifyParent, exit(42, 3<<8)), []byte("junk")} {
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	var es []Entry
	deadline := time.Now().Add(5 * time.Second)
	for len(es) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		es = h.Query("sb1", 0, nil, 0)
	}
	if len(es) != 2 {
		t.Fatalf("entries %+v", es)
	}
	st, ex := es[0], es[1]
	if st.Type != "process.start" || st.Data["pid"] != int32(42) || st.Data["ppid"] != int32(7) || st.Data["uid"] != uint32(1000) ||
		st.Data["path"] != "/usr/bin/sleep" || len(st.Data["argv"].([]string)) != 2 || !st.Time.Equal(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("start %+v", st)
	}
	// pid 43 never executed anything (a fork): no exit entry for it.
	if ex.Type != "process.exit" || ex.Data["pid"] != int32(42) || ex.Data["exitCode"] != uint32(3) {
		t.Fatalf("exit %+v", ex)
	}
}

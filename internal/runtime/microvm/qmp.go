//go:build linux

package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a minimal client of QEMU's machine protocol on the VMM's control
// socket (created by the runtime and inherited by QEMU, so QEMU never names
// a host path).
type qmp struct {
	c *net.UnixConn
	r *bufio.Reader
}

// dialQMP connects to the control socket at path and negotiates
// capabilities.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to the VMM's control socket: %w", err)
	}
	q := &qmp{c: conn.(*net.UnixConn), r: bufio.NewReader(conn)}
	if dl, ok := ctx.Deadline(); ok {
		_ = q.c.SetDeadline(dl)
	} else {
		_ = q.c.SetDeadline(time.Now().Add(time.Minute))
	}
	if _, err := q.r.ReadBytes('\n'); err != nil { // greeting
		q.close()
		return nil, fmt.Errorf("reading the VMM's greeting: %w", err)
	}
	if _, err := q.cmd("qmp_capabilities", nil); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) close() { q.c.Close() }

// cmd runs one command (with fds attached as SCM_RIGHTS) and returns its
// "return" value; asynchronous events are skipped.
func (q *qmp) cmd(name string, args any, fds ...int) (json.RawMessage, error) {
	req := map[string]any{"execute": name}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if len(fds) > 0 {
		_, _, err = q.c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	} else {
		_, err = q.c.Write(b)
	}
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", name, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", name, err)
		}
		var res struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &res); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", name, err)
		}
		switch {
		case res.Event != "":
			continue
		case res.Error != nil:
			return nil, fmt.Errorf("qmp %s: %s: %s", name, res.Error.Class, res.Error.Desc)
		default:
			return res.Return, nil
		}
	}
}

// waitMigration polls query-migrate until the migration completed.
func (q *qmp) waitMigration(ctx context.Context) error {
	for {
		raw, err := q.cmd("query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		_ = json.Unmarshal(raw, &st)
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("VMM state transfer %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return errors.New("VMM state transfer did not finish in time")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ignoreShared makes a state transfer skip guest RAM in a shared file
// backend (it stays in the sandbox's memory file).
func (q *qmp) ignoreShared() error {
	_, err := q.cmd("migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	})
	return err
}

package events

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// The six event types (E2B's packages/shared/pkg/events/sandbox.go).
const (
	Created      = "sandbox.lifecycle.created"
	Killed       = "sandbox.lifecycle.killed"
	Paused       = "sandbox.lifecycle.paused"
	Resumed      = "sandbox.lifecycle.resumed"
	Updated      = "sandbox.lifecycle.updated"
	Checkpointed = "sandbox.lifecycle.checkpointed"
)

// Types lists every event type.
var Types = []string{Created, Killed, Paused, Resumed, Updated, Checkpointed}

// IsType reports whether t is one of Types.
func IsType(t string) bool {
	for _, x := range Types {
		if x == t {
			return true
		}
	}
	return false
}

// Version is the SandboxEvent version the API answers.
const Version = "v1"

// States of store.Sandbox.State the hook reads.
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// internalKeys mark sandboxes that record no events (the sandbox
// package's boot-snapshot and template-build sandboxes).
var internalKeys = []string{"airlock.internal", "airlock.build"}

// Recorder derives events from sandbox row changes (its Hook).
type Recorder struct {
	// TeamID is every event's sandboxTeamId (TeamID).
	TeamID string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Recorded, when set, is called (inside the transaction, so it must
	// not block) whenever events are recorded: the deliverer's wake-up.
	Recorded func()
}

func (r *Recorder) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

// Execution is eventData.execution of killed and paused.
type Execution struct {
	StartedAt     string `json:"started_at"`
	VCPUCount     int    `json:"vcpu_count"`
	MemoryMB      int    `json:"memory_mb"`
	ExecutionTime int64  `json:"execution_time"` // ms
}

// Data is eventData (snake_case keys, as E2B's).
type Data struct {
	SandboxMetadata map[string]string `json:"sandbox_metadata,omitempty"`
	SetTimeout      string            `json:"set_timeout,omitempty"`
	Execution       *Execution        `json:"execution,omitempty"`
}

// Hook is the store.EventHook: see the package comment.
func (r *Recorder) Hook(ctx context.Context, tx store.EventTx, c store.Change) ([]*store.Event, error) {
	old, cur := c.Old, c.New
	row := cur
	if row == nil {
		row = old
	}
	if row == nil || internal(row) || (old != nil && internal(old)) {
		return nil, nil
	}
	var typ string
	switch {
	case c.Snapshot != nil:
		typ = Checkpointed
	case old == nil && cur.State == stateRunning:
		typ = Created
	case old == nil:
		return nil, nil
	case cur == nil:
		typ = Killed
	case old.State == stateRunning && cur.State == statePaused:
		typ = Paused
	case old.State != stateRunning && cur.State == stateRunning:
		typ = Resumed
	case old.State == stateRunning && cur.State == stateRunning && !cur.EndAt.Equal(old.EndAt) && !cur.EndAt.IsZero():
		typ = Updated
	default:
		return nil, nil
	}
	now := r.now()
	e := &store.Event{ID: NewID(), Type: typ, Timestamp: now, SandboxID: row.ID, TemplateID: row.TemplateID,
		BuildID: row.TemplateHash, TeamID: r.TeamID}
	data := Data{SandboxMetadata: row.Metadata}
	if typ == Created || typ == Resumed {
		e.ExecutionID = NewID()
	} else {
		last, err := tx.LastEvent(ctx, row.ID, Created, Resumed)
		if err != nil {
			return nil, fmt.Errorf("reading the sandbox's execution: %w", err)
		}
		start := row.StartedAt
		if last != nil {
			e.ExecutionID, start = last.ExecutionID, last.Timestamp
		}
		switch typ {
		case Updated:
			data.SetTimeout = cur.EndAt.UTC().Format(time.RFC3339Nano)
		case Killed, Paused:
			if start.IsZero() {
				start = now
			}
			data.Execution = &Execution{StartedAt: start.UTC().Format(time.RFC3339Nano), VCPUCount: row.CPUCount,
				MemoryMB: row.MemoryMB, ExecutionTime: now.Sub(start).Milliseconds()}
		}
	}
	e.Data = encodeData(data)
	if r.Recorded != nil {
		r.Recorded()
	}
	return []*store.Event{e}, nil
}

func internal(s *store.Sandbox) bool {
	for _, k := range internalKeys {
		if s.Metadata[k] != "" {
			return true
		}
	}
	return false
}

func encodeData(d Data) string {
	if len(d.SandboxMetadata) == 0 && d.SetTimeout == "" && d.Execution == nil {
		return ""
	}
	b, _ := json.Marshal(d)
	return string(b)
}

// SandboxEvent is E2B's wire shape of an event (the events API and
// webhook bodies).
type SandboxEvent struct {
	ID                 string          `json:"id"`
	Version            string          `json:"version"`
	Type               string          `json:"type"`
	Timestamp          string          `json:"timestamp"`
	EventData          json.RawMessage `json:"eventData"`
	SandboxID          string          `json:"sandboxId"`
	SandboxExecutionID string          `json:"sandboxExecutionId"`
	SandboxTemplateID  string          `json:"sandboxTemplateId"`
	SandboxBuildID     string          `json:"sandboxBuildId"`
	SandboxTeamID      string          `json:"sandboxTeamId"`
}

// Wire returns e's wire shape.
func Wire(e *store.Event) SandboxEvent {
	data := json.RawMessage("null")
	if e.Data != "" {
		data = json.RawMessage(e.Data)
	}
	return SandboxEvent{ID: e.ID, Version: Version, Type: e.Type, Timestamp: e.Timestamp.UTC().Format(time.RFC3339Nano),
		EventData: data, SandboxID: e.SandboxID, SandboxExecutionID: e.ExecutionID, SandboxTemplateID: e.TemplateID,
		SandboxBuildID: e.BuildID, SandboxTeamID: e.TeamID}
}

// NewID returns a random (version 4) UUID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// teamIDKey is the settings key of the team id.
const teamIDKey = "team_id"

// TeamID returns the daemon's (the API key's) team id, a UUID made on
// first use and kept in the store's settings.
func TeamID(ctx context.Context, st store.Store) (string, error) {
	id, err := st.GetSetting(ctx, teamIDKey)
	if err == nil && id != "" {
		return id, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("reading the team id: %w", err)
	}
	// Of daemons starting at once on one database (cluster nodes) the
	// first write wins, and every one reads it back.
	if id, err = st.InitSetting(ctx, teamIDKey, NewID()); err != nil {
		return "", fmt.Errorf("saving the team id: %w", err)
	}
	return id, nil
}

// DefaultRetention is --events-retention's default (E2B's events_ttl_days).
const DefaultRetention = 7 * 24 * time.Hour

// Retain deletes events and delivery attempts older than keep, now and
// every interval, until ctx ends.
func Retain(ctx context.Context, st store.EventStore, keep, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := st.DeleteEventsBefore(ctx, time.Now().Add(-keep))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("deleting old events", "err", err)
		case n > 0:
			log.Info("old events deleted", "events", n, "retention", keep)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

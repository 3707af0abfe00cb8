package store

import (
	"context"
	"time"
)

// Event is one recorded sandbox lifecycle event (E2B's SandboxEvent;
// internal/events owns its meaning and its wire shape). Events are written
// in the transaction of the sandbox change they report, by the store's
// EventHook, together with one pending Delivery per enabled webhook that
// subscribes to the event's type.
type Event struct {
	ID          string // uuid; a redelivery carries the same one
	Type        string // sandbox.lifecycle.*
	Timestamp   time.Time
	SandboxID   string
	ExecutionID string
	TemplateID  string
	BuildID     string
	TeamID      string
	Data        string // eventData as JSON; "" is null
}

// EventTx reads what an EventHook needs inside the transaction it runs in.
type EventTx interface {
	// LastEvent returns sandboxID's newest event of one of types; nil when
	// there is none.
	LastEvent(ctx context.Context, sandboxID string, types ...string) (*Event, error)
}

// Change is one change an EventHook is asked about: a sandbox row's (Old
// the row before, nil when there was none; New the row after, nil when
// deleted), or a snapshot taken of a sandbox (Snapshot set, Old and New
// both the sandbox's row, nil when it has none).
type Change struct {
	Old, New *Sandbox
	Snapshot *Snapshot
}

// EventHook derives the events of one change. It runs inside the change's
// transaction; its error aborts the change.
type EventHook func(ctx context.Context, tx EventTx, c Change) ([]*Event, error)

// EventQuery selects events for ListEvents.
type EventQuery struct {
	SandboxID string   // "" = every sandbox
	Types     []string // empty = every type
	Offset    int
	Limit     int // > 0
	Asc       bool
}

// Webhook is one registered webhook (E2B's WebhookDetail plus its secret).
// The store keeps Secret as it is given: internal/webhooks seals it
// (Secrets) before it is written.
type Webhook struct {
	ID        string
	Name      string
	URL       string
	Events    []string
	Enabled   bool
	Secret    string
	CreatedAt time.Time
}

// Delivery is one pending delivery of an event to a webhook, claimed by a
// deliverer under a lease (ClaimDeliveries).
type Delivery struct {
	Event     *Event
	WebhookID string
	URL       string
	Secret    string
	Attempts  int // attempts made before this one
}

// DeliveryAttempt is one attempt to deliver an event (E2B's
// WebhookDelivery).
type DeliveryAttempt struct {
	ID              string // e2b-delivery-id
	WebhookID       string
	EventID         string
	SandboxID       string
	EventType       string
	Status          string // success | failed
	DurationMs      int64
	RequestBody     string
	RequestHeaders  string
	RequestURL      string
	ResponseBody    string
	ResponseHeaders string
	ResponseStatus  int // 0: no response
	ErrorClass      string
	ErrorMessage    string
	Timestamp       time.Time
}

// AttemptQuery selects a webhook's delivery attempts.
type AttemptQuery struct {
	WebhookID  string
	Start, End time.Time // zero: unbounded
	Status     []string  // empty: any
	EventTypes []string  // empty: any
	Asc        bool
}

// EventStore is implemented by stores that record lifecycle events and
// deliver webhooks (both backends). Webhooks and events belong to no node.
type EventStore interface {
	// SetEventHook makes every PutSandbox, DeleteSandbox, batch delete and
	// PutSnapshot run in a transaction that also records h's events and
	// their pending deliveries. Set it before the store is used.
	SetEventHook(h EventHook)
	ListEvents(ctx context.Context, q EventQuery) ([]*Event, error)
	// DeleteEventsBefore removes events older than t, with their pending
	// deliveries, and delivery attempts older than t.
	DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error)

	// CreateWebhook inserts w; UpdateWebhook replaces an existing one
	// (ErrNotFound when none).
	CreateWebhook(ctx context.Context, w *Webhook) error
	UpdateWebhook(ctx context.Context, w *Webhook) error
	// ReplaceWebhookSecret stores secret as webhook id's secret when its
	// stored one is still old, and reports whether it did (false: the
	// webhook is gone or its secret changed meanwhile).
	ReplaceWebhookSecret(ctx context.Context, id, old, secret string) (bool, error)
	GetWebhook(ctx context.Context, id string) (*Webhook, error)
	// ListWebhooks returns every webhook, oldest first.
	ListWebhooks(ctx context.Context) ([]*Webhook, error)
	// DeleteWebhook removes a webhook and its pending deliveries.
	DeleteWebhook(ctx context.Context, id string) error

	// ClaimDeliveries leases up to limit due deliveries to owner for
	// lease: due means pending, its retry time past and no live lease. Of
	// several deliverers (api instances of a cluster) each delivery goes
	// to one (PostgreSQL: FOR UPDATE SKIP LOCKED).
	ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]*Delivery, error)
	// FinishDelivery records attempt a of d and ends owner's lease: the
	// delivery is done when retryAt is zero, else due again at retryAt.
	// Only the lease holder's call changes the delivery (the attempt is
	// recorded either way).
	FinishDelivery(ctx context.Context, owner string, d *Delivery, a *DeliveryAttempt, retryAt time.Time) error
	// ListAttempts returns a webhook's delivery attempts, newest first
	// unless q.Asc.
	ListAttempts(ctx context.Context, q AttemptQuery) ([]*DeliveryAttempt, error)
	// PendingDeliveries counts deliveries not yet done.
	PendingDeliveries(ctx context.Context) (int, error)
}

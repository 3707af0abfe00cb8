// Package events records E2B's sandbox lifecycle events
// (sandbox.lifecycle.created, .killed, .paused, .resumed, .updated,
// .checkpointed) and gives them E2B's wire shape (SandboxEvent).
//
// # How an event is recorded
//
// The sandbox manager does not call this package. The store does: the
// daemon installs Recorder.Hook as the store's event hook
// (store.EventStore.SetEventHook), and from then on every sandbox row
// change (PutSandbox, DeleteSandbox, the batch delete of parallel kills)
// runs in one transaction that reads the row as it was, writes the change,
// asks the hook which events the change means, and inserts them together
// with one pending delivery per enabled webhook subscribed to the type
// (internal/webhooks delivers them). So an event exists exactly when its
// change committed: a daemon killed at any moment loses none and records
// none twice (a kill that a restart finishes deletes the row once; the
// second delete finds no row and records nothing).
//
// The hook derives the type from the two rows: no row before and a running
// one after is created; a row deleted is killed (a timeout kill too); running
// to paused is paused; anything else to running is resumed; running to
// running with a new end time is updated (set_timeout); a snapshot of it
// (PutSnapshot) is checkpointed. A creation and a
// resume start a new execution (sandboxExecutionId); killed and paused carry
// it, and their eventData.execution tells when it started, its CPUs and
// memory and how long it ran, in milliseconds. Internal sandboxes (boot
// snapshots, template builds) record nothing. In a cluster the nodes'
// stores have the hook, and so does the api tier's, whose reaper deletes
// the rows of the running sandboxes of a lost node: each is killed.
//
// Events are kept for --events-retention (default 7 days): Retain deletes
// older events and delivery attempts every hour.
package events

package network

import (
	"context"
	"errors"
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/approval"
)

// Approver decides about destinations held for a sandbox's approval hook
// (approval.Broker; approval_linux.go holds them).
type Approver interface {
	Ask(ctx context.Context, id string, d approval.Dest) approval.Answer
}

// ApprovalConfig is the part of Config for the approval hold.
type ApprovalConfig struct {
	// ApprovalQueue is the NFQUEUE number the daemon reads held packets
	// from (--approval-queue); 0 turns the hold off. Two daemons on a host
	// need distinct numbers.
	ApprovalQueue uint16
	// Approver asks the hooks; nil turns the hold off.
	Approver Approver
	// DomainOf, when set, names the domain sandbox id last resolved to a
	// (the activity feed's DNS memory), for the question.
	DomainOf func(id string, a netip.Addr) string
	// ApprovalObserver, when set, sees every decision (the activity feed).
	ApprovalObserver func(id string, a approval.Answer)
}

// ErrNoApprovalHold: a policy with Egress.Hold on a manager without an
// approval queue (the daemon runs without --approval-queue).
var ErrNoApprovalHold = errors.New("this daemon holds no connections for approval hooks (no --approval-queue)")

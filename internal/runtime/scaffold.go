package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

// ErrInvalidSpec marks errors caused by a bad Spec or sandbox id (a caller
// error, not a runtime failure). Each runtime wraps it with its name
// (InvalidSpec).
var ErrInvalidSpec = errors.New("invalid sandbox spec")

// InvalidSpec returns the runtime named name's own ErrInvalidSpec: it reads
// "<name>: invalid sandbox spec" and errors.Is it ErrInvalidSpec.
func InvalidSpec(name string) error { return &specError{runtime: name} }

type specError struct{ runtime string }

func (e *specError) Error() string { return e.runtime + ": " + ErrInvalidSpec.Error() }
func (e *specError) Unwrap() error { return ErrInvalidSpec }

// MaxIDLen is the longest sandbox id (wire.MaxIDLen).
const MaxIDLen = wire.MaxIDLen

// ValidID checks the shape of a sandbox id: 1 to 64 characters of [a-z0-9]
// (wire.ValidID, the one id check of the daemon and the api tier).
func ValidID(id string) error { return wire.ValidID(id) }

// IDChars reports whether s is not empty and made of the characters of
// sandbox ids, whatever its length (wire.IDChars).
func IDChars(s string) bool { return wire.IDChars(s) }

// CheckID is ValidID for a runtime: a bad id is wrapped in specErr (the
// runtime's InvalidSpec).
func CheckID(specErr error, id string) error {
	if err := ValidID(id); err != nil {
		return fmt.Errorf("%w: %w", specErr, err)
	}
	return nil
}

// MakeSandboxDir is the start of every runtime's Start after its checks: it
// creates the sandbox's private dir (mode 0700, parents as needed). A dir
// that exists already is specErr (the runtime's InvalidSpec): it may belong
// to another sandbox.
func MakeSandboxDir(dir string, specErr error) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating parent of sandbox dir: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: sandbox dir %s already exists", specErr, dir)
		}
		return fmt.Errorf("creating sandbox dir: %w", err)
	}
	return nil
}

// cleanupTimeout bounds the steps of Cleanup.Unwind.
const cleanupTimeout = 30 * time.Second

// Cleanup is a stack of undo steps of an operation that can fail half-way
// (a runtime's Start or Clone): each step pushed undoes what was done
// before it, and Unwind runs them, last first, only when the operation
// failed. The zero value is empty and ready.
type Cleanup struct {
	steps []func(ctx context.Context)
}

// Push adds a step.
func (c *Cleanup) Push(step func(ctx context.Context)) { c.steps = append(c.steps, step) }

// Unwind runs the steps, last first, when *errp is not nil (meant for a
// defer with the operation's named error result; a step may change
// *errp). The steps get a context of their own (30 s) that ctx's
// cancellation does not end: a cancelled start is cleaned up all the same.
func (c *Cleanup) Unwind(ctx context.Context, errp *error) {
	if *errp == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for i := len(c.steps) - 1; i >= 0; i-- {
		c.steps[i](cctx)
	}
}

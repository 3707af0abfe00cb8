package runtime

import "fmt"

// MountError is a runtime's refusal of one of a Spec's Mounts (a volume
// whose directory it cannot serve): a fault of the volume, not of the
// runtime, which the sandbox manager reports to the caller naming the
// volume (Index is the mount's index in Spec.Mounts).
type MountError struct {
	Index int
	Err   error
}

func (e *MountError) Error() string { return fmt.Sprintf("mount %d: %v", e.Index, e.Err) }

func (e *MountError) Unwrap() error { return e.Err }

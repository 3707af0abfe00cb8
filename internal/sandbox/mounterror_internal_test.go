package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// A runtime's refusal of a volume (a microVM's NFS server refusing its file
// system) is a 400 naming the volume, without host paths; it was a 500.
func TestMountUserError(t *testing.T) {
	vols := []volume.Mount{{Name: "a"}, {Name: "bucket-b"}}
	err := fmt.Errorf("volumes of sb: %w", &runtime.MountError{Index: 1,
		Err: fmt.Errorf("file handles of /var/lib/airlock/buckets/mnt/x: %w", syscall.EOPNOTSUPP)})
	ue, ok := AsUserError(mountUserError(err, vols))
	if !ok || ue.Code != http.StatusBadRequest {
		t.Fatalf("got %v, want a 400", err)
	}
	if !strings.Contains(ue.Msg, "'bucket-b'") || strings.Contains(ue.Msg, "/var/lib") {
		t.Errorf("message %q: want the volume's name and no host path", ue.Msg)
	}
	other := errors.New("boom")
	if got := mountUserError(other, vols); got != other {
		t.Errorf("other error changed: %v", got)
	}
}

package artifacts

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestCopyPipelined: every byte in order whatever the reads' sizes (empty,
// short reads, exact chunk multiples); a read error and a write error end
// the copy with that error.
func TestCopyPipelined(t *testing.T) {
	for _, n := range []int{0, 1, 1<<20 - 1, 1 << 20, 3<<20 + 12345, 8 << 20} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*31 + i>>11)
		}
		for name, r := range map[string]io.Reader{"plain": bytes.NewReader(src), "half": iotest.HalfReader(bytes.NewReader(src)), "onebyte-ish": iotest.DataErrReader(bytes.NewReader(src))} {
			var out bytes.Buffer
			if err := copyPipelined(&out, r); err != nil {
				t.Fatalf("%d bytes, %s: %v", n, name, err)
			}
			if !bytes.Equal(out.Bytes(), src) {
				t.Fatalf("%d bytes, %s: copied %d bytes, not the same", n, name, out.Len())
			}
		}
	}
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(make([]byte, 3<<20)), iotest.ErrReader(boom))
	if err := copyPipelined(io.Discard, r); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
	if err := copyPipelined(failWriter{boom}, bytes.NewReader(make([]byte, 5<<20))); !errors.Is(err, boom) {
		t.Fatalf("write error: %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

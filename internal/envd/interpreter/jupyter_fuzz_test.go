package interpreter

import (
	"bytes"
	"testing"
)

// FuzzJupyterDecode feeds arbitrary multipart frames to the kernel message
// decoder: it never panics, rejects anything not signed with the session
// key, and decodes correctly signed messages.
func FuzzJupyterDecode(f *testing.F) {
	f.Add([]byte("id\x1f<IDS|MSG>\x1fsig\x1f{\"msg_type\":\"status\"}\x1f{}\x1f{}\x1f{}"), true)
	f.Add([]byte("<IDS|MSG>\x1f\x1f\x1f\x1f\x1f"), false)
	f.Add([]byte("\x1f\x1f<IDS|MSG>"), true)
	f.Add([]byte("<IDS|MSG>\x1fx\x1f{\x1f[\x1f\"\x1f\xff"), true)
	k := &jupyterKernel{key: []byte("0123456789abcdef")}
	f.Fuzz(func(t *testing.T, raw []byte, resign bool) {
		frames := bytes.Split(raw, []byte{0x1f})
		i := 0
		for i < len(frames) && string(frames[i]) != jupyterDelim {
			i++
		}
		signed := false
		if resign && len(frames) >= i+6 {
			frames[i+1] = []byte(k.sign(frames[i+2], frames[i+3], frames[i+4], frames[i+5]))
			signed = true
		}
		m, err := k.decode(frames)
		if !signed && err == nil && len(frames) >= i+6 && string(frames[i+1]) != k.sign(frames[i+2], frames[i+3], frames[i+4], frames[i+5]) {
			t.Fatalf("unsigned message accepted: %q", raw)
		}
		if err == nil && m == nil {
			t.Fatal("nil message without error")
		}
	})
}

package interpreter

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// WarmupFile is where a template chooses the warm-up of its Python contexts
// (code run silently in each new Python kernel before its first cell): the
// agent reads it once at start, so a template's boot snapshot holds what it
// imported. Absent: DefaultWarmup. Empty (or only blank lines and comments):
// no warm-up. Anything else: that code, as an IPython cell.
const WarmupFile = "/etc/airlock/interpreter-warmup.py"

// maxWarmupBytes caps what LoadWarmup reads: a warm-up is a few imports.
const maxWarmupBytes = 64 << 10

// LoadWarmup returns the warm-up that the file at path chooses (see
// WarmupFile) and a short description of where it came from, for the log.
// A file that cannot be read, or is larger than 64 KiB, is an error; the
// caller should then fall back to DefaultWarmup (the code that is returned
// with the error), since a sandbox must start whatever its template holds.
func LoadWarmup(path string) (code, source string, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultWarmup, "default (no " + path + ")", nil
	}
	if err != nil {
		return DefaultWarmup, "default", fmt.Errorf("reading the interpreter warm-up: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxWarmupBytes+1))
	if err != nil {
		return DefaultWarmup, "default", fmt.Errorf("reading the interpreter warm-up %s: %w", path, err)
	}
	if len(b) > maxWarmupBytes {
		return DefaultWarmup, "default", fmt.Errorf("interpreter warm-up %s is larger than %d bytes", path, maxWarmupBytes)
	}
	code = string(b)
	if isBlankPython(code) {
		return "", "none (" + path + " is empty)", nil
	}
	return code, path, nil
}

// isBlankPython reports whether code holds only blank lines and comments.
func isBlankPython(code string) bool {
	for line := range strings.Lines(code) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

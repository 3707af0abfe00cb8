//go:build linux

package server

import (
	"net/http"

	envdfiles "github.com/airlock-sandbox/airlock/internal/envd/files"
	"github.com/airlock-sandbox/airlock/internal/envd/filesystem"
	"github.com/airlock-sandbox/airlock/internal/envd/process"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// services returns the configured services or the defaults.
func (h *Handler) services() (processpbconnect.ProcessHandler, filesystempbconnect.FilesystemHandler, http.Handler) {
	proc := h.opts.Process
	if proc == nil {
		proc = process.New(h.st, h.log)
	}
	fs := h.opts.Filesystem
	if fs == nil {
		fs = filesystem.New(h.st, h.log)
	}
	files := h.opts.Files
	if files == nil {
		files = envdfiles.New(h.st, h.log)
	}
	return proc, fs, files
}

package proxy

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// isUpload reports whether r writes files into the sandbox through envd's
// /files endpoint (the SDKs' files.write / upload URLs).
func isUpload(r *http.Request) bool {
	return r.URL.Path == "/files" && (r.Method == http.MethodPost || r.Method == http.MethodPut)
}

// uploadAllowed asks Options.UploadGuard about an upload and answers 507
// {code,message,sandboxId} itself when it refuses (the host's disk is full:
// the sandbox's writable layer is a sparse image on the host, so the upload
// would fail half-way with I/O errors inside the sandbox).
func (p *proxy) uploadAllowed(w http.ResponseWriter, r *http.Request, id string) bool {
	if p.opts.UploadGuard == nil || !isUpload(r) {
		return true
	}
	err := p.opts.UploadGuard()
	if err == nil {
		return true
	}
	middleware.WriteJSON(w, http.StatusInsufficientStorage, map[string]any{
		"code":      http.StatusInsufficientStorage,
		"sandboxId": id,
		"message":   "upload refused: " + err.Error(),
	})
	return false
}

package airlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// APIError is a non-2xx answer of the daemon (or of an agent's /files),
// decoded from the E2B error body {"code": <status>, "message": "..."}.
type APIError struct {
	Status  int    // HTTP status
	Message string // server message, or the status text when the body had none
	// Code is the string code of a volume content API error (E2B's
	// {code: "path_not_found", message}); "" elsewhere.
	Code string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d: %s", e.Status, e.Message)
}

// IsNotFound reports whether err is (or wraps) an APIError with status 404.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// StatusOf returns the HTTP status of a wrapped *APIError, or 0.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// checkResponse turns a non-2xx response into an *APIError.
func checkResponse(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode}
	var body struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
		Error   string          `json:"error"`
	}
	if err := json.Unmarshal(b, &body); err == nil {
		var code string
		if json.Unmarshal(body.Code, &code) == nil {
			e.Code = code
		}
		e.Message = body.Message
		if e.Message == "" {
			e.Message = body.Error
		}
	} else if s := strings.TrimSpace(string(b)); s != "" && len(s) < 512 {
		e.Message = s // plain-text error (e.g. a 400 routing error of the proxy)
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

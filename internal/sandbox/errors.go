package sandbox

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a user-facing error: the message is safe to show to API clients
// and Code is the HTTP status it maps to. Any other error returned by the
// Manager is internal and must be reported generically.
type Error struct {
	Code int    // HTTP status code
	Msg  string // message shown to the client
}

func (e *Error) Error() string { return e.Msg }

// userErrorf builds a user error with an HTTP status code.
func userErrorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// notFound is the error returned for unknown sandbox ids (E2B wording).
func notFound(id string) *Error {
	return userErrorf(http.StatusNotFound, "sandbox %q doesn't exist or you don't have access to it", id)
}

// ErrTemplateNotFound must be returned (possibly wrapped) by
// Templates.Resolve for unknown template names.
var ErrTemplateNotFound = errors.New("template not found")

// AsUserError reports whether err is (or wraps) a user error and returns it.
func AsUserError(err error) (*Error, bool) {
	var ue *Error
	if errors.As(err, &ue) {
		return ue, true
	}
	return nil, false
}

// IsNotFound reports whether err is a user error with status 404.
func IsNotFound(err error) bool {
	ue, ok := AsUserError(err)
	return ok && ue.Code == http.StatusNotFound
}

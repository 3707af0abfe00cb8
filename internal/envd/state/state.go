// Package state holds the agent's mutable defaults, set by POST /init:
// access token, default user and workdir, and the sandbox's env vars.
package state

import (
	"crypto/subtle"
	"maps"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// Version is the envd protocol version this agent reports (spec §1.6: ≥ 0.6.4);
// the daemon hands the same constant out as envdVersion.
const Version = guest.Version

// State is shared by every service of the agent. The zero value is usable.
type State struct {
	// mu guards every field below.
	mu             sync.RWMutex
	accessToken    string
	defaultUser    string
	defaultWorkdir string
	envVars        map[string]string
}

// New returns a State with the compiled-in defaults.
func New(defaultUser string) *State {
	return &State{defaultUser: defaultUser, envVars: map[string]string{}}
}

// Init applies a /init request. A nil token pointer clears the access token
// (the spec: "sending no accessToken clears an existing one").
func (s *State) Init(token *string, defaultUser, defaultWorkdir *string, envVars map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token == nil {
		s.accessToken = ""
	} else {
		s.accessToken = *token
	}
	if defaultUser != nil && *defaultUser != "" {
		s.defaultUser = *defaultUser
	}
	if defaultWorkdir != nil {
		s.defaultWorkdir = *defaultWorkdir
	}
	if envVars != nil {
		if s.envVars == nil {
			s.envVars = map[string]string{}
		}
		maps.Copy(s.envVars, envVars)
	}
}

// AccessToken returns the current token ("" = unsecured).
func (s *State) AccessToken() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.accessToken
}

// CheckToken reports whether got matches the access token (constant time).
// With no token configured every request passes.
func (s *State) CheckToken(got string) bool {
	tok := s.AccessToken()
	if tok == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(got)) == 1
}

// DefaultUser returns the user used when a request names none.
func (s *State) DefaultUser() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.defaultUser == "" {
		return "root"
	}
	return s.defaultUser
}

// DefaultWorkdir returns the default working directory ("" = user's home).
func (s *State) DefaultWorkdir() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultWorkdir
}

// EnvVars returns a copy of the sandbox's default env vars.
func (s *State) EnvVars() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.envVars)
}

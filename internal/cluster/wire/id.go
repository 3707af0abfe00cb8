package wire

import "fmt"

// MaxIDLen is the longest sandbox id.
const MaxIDLen = 64

// ValidID checks the shape of a sandbox id: 1 to 64 characters of [a-z0-9].
// Ids become file, cgroup and network namespace names and host names of the
// proxy (`<port>-<id>.<domain>`); the ids Airlock makes are 21 characters.
// It is the one id check of the daemon and the api tier (proxy, runtimes,
// router; the list cursor checks IDChars).
func ValidID(id string) error {
	if len(id) > MaxIDLen || !IDChars(id) {
		return fmt.Errorf("id %q must match [a-z0-9]{1,64}", id)
	}
	return nil
}

// IDChars reports whether s is not empty and made of the characters of
// sandbox ids ([a-z0-9]), whatever its length. ValidID adds the length
// limit; only the list cursor (and a lookup that answers "not found" for
// anything else) checks no more than this: it carries any id of that shape
// back and forth, and an id too long to exist just matches no sandbox.
func IDChars(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

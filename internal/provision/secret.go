package provision

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// passwordBytes is the length of a generated password before hex encoding:
// 192 bits, far beyond guessing, and hex needs no quoting in a URL, a
// keyword/value DSN, a pwfile or an environment variable.
const passwordBytes = 24

// superuser is the role of every server harmless starts.
const superuser = "postgres"

// newPassword returns a password for one server: random, from crypto/rand,
// never reused, never written anywhere but the server's own catalogue (as a
// SCRAM verifier) and the DSN that Server.DSN returns.
func newPassword() (string, error) {
	b := make([]byte, passwordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate a password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

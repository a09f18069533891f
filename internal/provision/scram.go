package provision

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password (RFC 5802, 7677), in pg_authid's format, so that `ALTER ROLE
// ... PASSWORD '<verifier>'` sets the password without the password ever
// reaching the server: a statement is written to logs and to
// pg_stat_statements' file, which pg_auto_failover turns on, and a
// password in it would sit in clear on disk. The password is ASCII (hex,
// newPassword), which SASLprep leaves as it is.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("SCRAM salt: %w", err)
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("SCRAM key: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(server)), nil
}

package certificate

import (
	"encoding/json"
	"fmt"
	"os"
)

// WriteJSON writes the certificate to path, indented: the JSON
// certificate of docs/reports.md.
func (c Certificate) WriteJSON(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode certificate: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	return nil
}

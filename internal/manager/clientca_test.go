package manager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebhookClientCAFileErrors: a --webhook-client-ca-file that cannot be
// used stops Portal at start with an error naming the file and the problem,
// instead of serving a webhook that accepts every client.
func TestWebhookClientCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, want string
	}{
		{filepath.Join(dir, "missing.crt"), "webhook client CA: open " + filepath.Join(dir, "missing.crt")},
		{notPEM, "webhook client CA: " + notPEM + ": admission: the client CA holds no PEM certificate"},
	} {
		cfg := Defaults()
		cfg.Admission.Enabled = true
		cfg.Admission.ClientCAFile = tc.file
		_, err := newAdmission(&cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--webhook-client-ca-file %s: got %v, want %q", tc.file, err, tc.want)
		}
	}
}

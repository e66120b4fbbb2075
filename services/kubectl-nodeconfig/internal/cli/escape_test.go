package cli

import (
	"bytes"
	"strings"
	"testing"
)

// Whatever reaches the terminal through Main has its control characters
// shown, not sent: here an argument's echo in the error line.
func TestMainShowsControlCharacters(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"status", "--no-such-flag\x1b]0;pwned\x07"}, &stdout, &stderr); code == 0 {
		t.Fatal("an unknown flag succeeded")
	}
	if strings.ContainsAny(stderr.String(), "\x1b\x07") || !strings.Contains(stderr.String(), `\u001b]0;pwned\u0007`) {
		t.Fatalf("stderr %q; want the escape shown as \\u001b", stderr.String())
	}
}

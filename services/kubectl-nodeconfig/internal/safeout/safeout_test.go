package safeout

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestControlCharactersAreShownNotSent(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"node-1\tActive\n", "node-1\tActive\n"},
		{"error: \x1b[2J\x1b]0;pwned\x07gone", `error: \u001b[2J\u001b]0;pwned\u0007gone`},
		{"carriage\rreturn", `carriage\u000dreturn`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"ünïcödé ✓", "ünïcödé ✓"},
		{"bad utf-8 \xff", "bad utf-8 \xff"},
	} {
		var b bytes.Buffer
		n, err := Writer(&b).Write([]byte(tc.in))
		if err != nil || n != len(tc.in) {
			t.Fatalf("%q: wrote %d, %v", tc.in, n, err)
		}
		if b.String() != tc.want {
			t.Errorf("%q came out %q, want %q", tc.in, b.String(), tc.want)
		}
	}
	// JSON output stays JSON: a C1 character inside a string becomes an
	// escape JSON reads back as the same character.
	var b bytes.Buffer
	if err := json.NewEncoder(Writer(&b)).Encode(map[string]string{"message": "next\u0085line"}); err != nil {
		t.Fatal(err)
	}
	var back map[string]string
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back["message"] != "next\u0085line" {
		t.Fatalf("%q decoded to %v, %v", b.String(), back, err)
	}
}

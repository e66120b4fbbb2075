package agents

import (
	"encoding/base64"
	"strings"
	"testing"
	"unsafe"
)

// jwt builds a token shaped as the API server's: base64url parts, no
// padding.
func jwt(header, payload string, sig []byte) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(sig)
}

// A compacted token gives back exactly the text minted, in fewer bytes,
// with one copy of the header for all tokens that share it.
func TestCompactTokensGiveBackTheTextMinted(t *testing.T) {
	var header string
	sig := []byte(strings.Repeat("\xfb\x01", 128))
	a := jwt(`{"alg":"RS256","kid":"k1"}`, `{"aud":["nodeconfig-agent/node-a"],"exp":1795000000}`, sig)
	b := jwt(`{"alg":"RS256","kid":"k1"}`, `{"aud":["nodeconfig-agent/node-b"],"exp":1795000001}`, sig)
	ca, cb := compact(a, &header), compact(b, &header)
	if got := ca.text(""); got != a {
		t.Fatalf("text %q, want %q", got, a)
	}
	if got := cb.text("Bearer "); got != "Bearer "+b {
		t.Fatalf("text %q, want the prefix and %q", got, b)
	}
	if unsafe.StringData(ca.header) != unsafe.StringData(cb.header) {
		t.Fatal("two tokens of one key keep two copies of their header")
	}
	if kept := len(ca.raw); kept >= len(a)*4/5 {
		t.Fatalf("keeps %d bytes of a %d-byte token", kept, len(a))
	}
}

// Whatever is not a JWT whose parts decode exactly is kept as it came.
func TestTokensThatAreNotCompactJWTsAreKeptAsText(t *testing.T) {
	var header string
	for _, tok := range []string{
		"opaque-token",
		"a.b",
		"a.b.c.d",
		".eyJ9.c2ln",
		"eyJhIjoxfQ.eyJhIjoxfQ.c2ln=",  // padded
		"eyJhIjoxfQ.eyJhIjoxfR.c2lnAA", // non-zero padding bits: no exact round trip
		"nodeconfig-agent/node-a#1",
	} {
		c := compact(tok, &header)
		if c.text("") != tok {
			t.Errorf("%q came back as %q", tok, c.text(""))
		}
	}
}

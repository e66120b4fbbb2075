package agents

import (
	"encoding/base64"
	"strings"
	"unsafe"
)

// compactToken keeps a token in fewer bytes than its text, for thousands
// of nodes' tokens held for most of an hour: a JWT's payload and signature
// decoded from base64url (three quarters of the size), and its header,
// the same for every token one key signs, shared. A token that is not
// such a JWT is kept as it came.
type compactToken struct {
	header string // shared; "" when raw holds the whole text
	raw    []byte // payload then signature, decoded; or the text
	split  int    // where the signature starts in raw
}

var jwtPart = base64.RawURLEncoding.Strict()

// compact packs tok, sharing *header (updated to tok's header, copied,
// when it differs). It keeps the text whenever the packed form would not
// give back exactly the same text.
func compact(tok string, header *string) compactToken {
	h, rest, ok1 := strings.Cut(tok, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || h == "" || strings.Contains(sig, ".") {
		return compactToken{raw: []byte(tok)}
	}
	p, err1 := jwtPart.DecodeString(payload)
	s, err2 := jwtPart.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return compactToken{raw: []byte(tok)}
	}
	if h != *header {
		*header = strings.Clone(h) // not a slice of tok, which it would keep whole
	}
	raw := make([]byte, 0, len(p)+len(s)) // exactly: append would round up
	c := compactToken{header: *header, raw: append(append(raw, p...), s...), split: len(p)}
	if c.text("") != tok {
		return compactToken{raw: []byte(tok)}
	}
	return c
}

// text is the token as it was minted, after prefix.
func (c compactToken) text(prefix string) string {
	if c.header == "" {
		return prefix + string(c.raw)
	}
	payload, sig := c.raw[:c.split], c.raw[c.split:]
	b := make([]byte, 0, len(prefix)+len(c.header)+2+jwtPart.EncodedLen(len(payload))+jwtPart.EncodedLen(len(sig)))
	b = append(append(append(b, prefix...), c.header...), '.')
	b = append(jwtPart.AppendEncode(b, payload), '.')
	b = jwtPart.AppendEncode(b, sig)
	// As strings.Builder does: b is never written again, so the string
	// can be its bytes, without a copy per call.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

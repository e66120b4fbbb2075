package authn

import (
	"fmt"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
)

// Prechecks judge a bearer token by itself, before the API server is
// asked: the gRPC tap and the metrics guard refuse with them what a
// TokenReview could never accept, so that garbage costs no review.
type Prechecks struct {
	// Audience, when set, must be one of the token's; empty leaves the
	// audience to the review (the API server's own, for a review that
	// names none).
	Audience string
	// Keys, when set and read, must verify the token's signature.
	Keys *KeySet
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Check reads a token's claims and says why it can never pass: longer than
// any ServiceAccount token, not a JWT, not for the audience, expired or not
// yet valid, or (where the cluster's keys are known) not signed by them.
// The TokenReview decides the rest.
func (p Prechecks) Check(token string) (jwt.Claims, string) {
	var c jwt.Claims
	if len(token) > MaxTokenBytes {
		// Refused before it is decoded: a ServiceAccount token is about a
		// kilobyte, and decoding costs what the caller chose to send.
		return c, fmt.Sprintf("longer than %d bytes", MaxTokenBytes)
	}
	parsed, err := jwt.ParseSigned(token, tokenAlgorithms)
	if err != nil {
		return c, "not a signed JWT"
	}
	if err := parsed.UnsafeClaimsWithoutVerification(&c); err != nil {
		return c, "unreadable claims"
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	expected := jwt.Expected{Time: now()}
	if p.Audience != "" {
		expected.AnyAudience = jwt.Audience{p.Audience}
	}
	if err := c.ValidateWithLeeway(expected, time.Minute); err != nil {
		return c, fmt.Sprintf("claims: %v", err)
	}
	return c, p.Keys.verify(parsed)
}

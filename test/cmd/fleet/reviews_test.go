package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The change waits on the audit log's last TokenReview, and counts the
// ones in its window: other requests, and a review still in flight, are
// not reviews.
func TestTokenReviewsAreReadFromTheAuditLog(t *testing.T) {
	const log = `{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"tokenreviews"},"requestReceivedTimestamp":"2026-11-24T07:00:00Z"}
{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"serviceaccounts","subresource":"token"},"requestReceivedTimestamp":"2026-11-24T07:00:30Z"}
{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"tokenreviews"},"requestReceivedTimestamp":"2026-11-24T07:00:20Z"}
{"stage":"RequestReceived","verb":"create","objectRef":{"resource":"tokenreviews"},"requestReceivedTimestamp":"2026-11-24T07:00:50Z"}
{"stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"nodes"},"requestReceivedTimestamp":"2026-11-24T07:00:40Z"}
`
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	_, reviews, err := tokenCalls(path)
	if err != nil {
		t.Fatal(err)
	}
	at := func(sec int) time.Time { return time.Date(2026, 11, 24, 7, 0, sec, 0, time.UTC) }
	if got := reviews.between(at(0), at(60)); got != 2 {
		t.Errorf("reviews in the minute: %d, want 2", got)
	}
	if got := reviews.between(at(10), at(60)); got != 1 {
		t.Errorf("reviews from 07:00:10: %d, want 1", got)
	}
	if got, want := reviews.cachedUntil(), at(80); !got.Equal(want) {
		t.Errorf("cached until %v, want %v (the last review, 07:00:20, and a minute)", got, want)
	}
}

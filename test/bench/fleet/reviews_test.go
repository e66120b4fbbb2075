package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The change waits on the audit log's last TokenReview, and counts the
// ones in its window: other requests, and a review still in flight, are
// not reviews, and neither is one refused. The reconciler's TokenRequests,
// the agents' allowed status patches and nodeconfig's refused requests are
// told apart from the others' in the same pass.
func TestTokenReviewsAreReadFromTheAuditLog(t *testing.T) {
	const log = `{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"tokenreviews"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-11-24T07:00:00Z"}
{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"serviceaccounts","subresource":"token"},"requestReceivedTimestamp":"2026-11-24T07:00:30Z"}
{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"tokenreviews"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-11-24T07:00:20Z"}
{"stage":"ResponseComplete","verb":"create","userAgent":"nodeconfig-checkpointd/fleet","objectRef":{"resource":"tokenreviews"},"responseStatus":{"code":429},"requestReceivedTimestamp":"2026-11-24T07:00:25Z"}
{"stage":"RequestReceived","verb":"create","objectRef":{"resource":"tokenreviews"},"requestReceivedTimestamp":"2026-11-24T07:00:50Z"}
{"stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"nodes"},"requestReceivedTimestamp":"2026-11-24T07:00:40Z"}
{"stage":"ResponseComplete","verb":"create","objectRef":{"resource":"serviceaccounts","name":"nodeconfig-reconciler","subresource":"token"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-11-24T07:00:31Z"}
{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:nodeconfig-system:nodeconfig-status"},"objectRef":{"resource":"nodes","subresource":"status"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-24T07:00:41Z"}
{"stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:nodeconfig-system:nodeconfig-status"},"objectRef":{"resource":"nodes","subresource":"status"},"responseStatus":{"code":422},"requestReceivedTimestamp":"2026-11-24T07:00:42Z"}
{"stage":"ResponseComplete","verb":"patch","userAgent":"nodeconfig-statusd/fleet","user":{"username":"system:serviceaccount:nodeconfig-system:nodeconfig-status"},"objectRef":{"resource":"nodes","subresource":"status"},"responseStatus":{"code":429},"requestReceivedTimestamp":"2026-11-24T07:00:44Z"}
{"stage":"ResponseComplete","verb":"get","userAgent":"fleet-ceiling-probe","objectRef":{"resource":"nodes"},"responseStatus":{"code":429},"requestReceivedTimestamp":"2026-11-24T07:00:45Z"}
{"stage":"ResponseComplete","verb":"patch","user":{"username":"admin"},"objectRef":{"resource":"nodes","subresource":"status"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-24T07:00:43Z"}
`
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	calls, err := readCalls(path)
	if err != nil {
		t.Fatal(err)
	}
	reviews := calls.tokenReviews
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
	// The agents' own token requests (at 07:00:30, no name) are not the
	// reconciler's.
	if got := calls.tokenRequests.between(at(0), at(60)); got != 1 {
		t.Errorf("the reconciler's TokenRequests: %d, want 1", got)
	}
	// Only statusd's allowed status patch: not the refused ones, nor the
	// admin's.
	if got := calls.agentPatches.between(at(0), at(60)); got != 1 {
		t.Errorf("the agents' status patches: %d, want 1", got)
	}
	// nodeconfig's 429s (a review and a patch), not another client's.
	if got := calls.refused.between(at(0), at(60)); got != 2 {
		t.Errorf("nodeconfig's requests refused as too many: %d, want 2", got)
	}
}

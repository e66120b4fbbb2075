package main

import "testing"

// The counts come from the reconciler's own series, by label.
func TestParseSyncsReadsSyncsAndTokenRequestsByLabel(t *testing.T) {
	page := []byte(`# TYPE nodeconfig_agent_token_requests_total counter
nodeconfig_agent_token_requests_total{when="ahead"} 7
nodeconfig_agent_token_requests_total{when="on_use"} 3
# TYPE nodeconfig_reconciler_syncs_total counter
nodeconfig_reconciler_syncs_total{queue="nodes",result="ok"} 10
nodeconfig_reconciler_syncs_total{queue="nodes",result="error"} 2
nodeconfig_reconciler_syncs_total{queue="nodes",result="waiting"} 5
nodeconfig_reconciler_syncs_total{queue="nodeconfigs",result="ok"} 4
`)
	got, err := parseSyncs(page)
	if err != nil {
		t.Fatal(err)
	}
	if want := (syncCounts{nodes: 17, nodesFailed: 2, nodesWaited: 5, nodeConfigs: 4, tokensOnUse: 3, tokensAhead: 7}); got != want {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
}

// -fail-on-failed-sync fails on one failed node sync, and on a page that
// counts no node sync at all (a renamed series must not read as success).
func TestNoneFailedFailsOnAFailedSyncOrNoCount(t *testing.T) {
	for _, tc := range []struct {
		s    syncCounts
		fail bool
	}{
		{syncCounts{nodes: 40, nodesWaited: 3}, false},
		{syncCounts{nodes: 40, nodesFailed: 1}, true},
		{syncCounts{}, true},
	} {
		if err := tc.s.noneFailed(); (err != nil) != tc.fail {
			t.Errorf("%+v: %v, want failure %v", tc.s, err, tc.fail)
		}
	}
}

package status

import "testing"

// Each phase and reconciler state a node can show lands in the group an
// on-call engineer would put it in.
func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		phase, ready, state string
		hasSource           bool
		want                string
	}{
		{"Active", "True", "ACTIVE", true, OutcomeActive},
		{"Active", "True", "", true, OutcomeActive}, // reconciler not reachable
		{"LocalDefault", "True", "LOCAL_DEFAULT", false, OutcomeActive},
		{"LocalDefault", "True", "", true, OutcomeWaiting},
		{"Active", "True", "WAITING", true, OutcomeWaiting},
		{"Active", "True", "HALTED", true, OutcomeWaiting},
		{"Soaking", "True", "SOAKING", true, OutcomeTrial},
		{"Activating", "Unknown", "", true, OutcomeTrial},
		{"Restarting", "Unknown", "SOAKING", true, OutcomeTrial},
		{"WaitingForHealth", "Unknown", "SOAKING", true, OutcomeTrial},
		{"RolledBack", "False", "ROLLED_BACK", true, OutcomeRefused},
		{"ConsumerUnhealthy", "False", "", true, OutcomeRefused},
		{"HealthGateFailed", "False", "ROLLED_BACK", true, OutcomeRefused},
		{"StartGuardFellBack", "False", "", true, OutcomeRefused},
		{"Active", "True", "ROLLED_BACK", true, OutcomeRefused},
		{"DownloadFailed", "False", "FAILING", true, OutcomeFailed},
		{"WriteFailed", "False", "", true, OutcomeFailed},
		{"NodeFilesUnreadable", "False", "", true, OutcomeFailed},
		{"CheckpointdUnavailable", "Unknown", "", true, OutcomeFailed},
		{"Active", "True", "FAILING", true, OutcomeFailed},
		{"Active", "True", "CONFLICT", true, OutcomeConflict},
		{"", "", "", true, OutcomeUnreported},
		{"", "", "WAITING", true, OutcomeWaiting},
		{"SomethingNew", "True", "", true, OutcomeActive},
		{"SomethingNew", "Unknown", "", true, OutcomeTrial},
	} {
		if got := outcomeOf(tc.phase, tc.ready, tc.state, tc.hasSource); got != tc.want {
			t.Errorf("phase %q ready %q state %q source %v: %s, want %s", tc.phase, tc.ready, tc.state, tc.hasSource, got, tc.want)
		}
	}
	for _, o := range Outcomes {
		if OutcomeMeaning(o) == "" {
			t.Errorf("outcome %s has no meaning", o)
		}
	}
}

// --phase keeps the listed nodes; the groups still count every one.
func TestPhaseFilter(t *testing.T) {
	in := fixture()
	in.Phases = []string{"soaking"}
	r := Build(in)
	demo := r.NodeConfigs[0]
	if len(demo.Nodes) != 1 || demo.Nodes[0].Name != "n1" {
		t.Fatalf("--phase soaking lists %+v", demo.Nodes)
	}
	if len(demo.Groups) != 2 || demo.Groups[0] != (Group{OutcomeTrial, 1}) || demo.Groups[1] != (Group{OutcomeActive, 1}) {
		t.Errorf("groups %+v, want Trial 1 and Active 1", demo.Groups)
	}
	if other := r.NodeConfigs[1]; len(other.Nodes) != 0 || len(other.Groups) != 1 {
		t.Errorf("other: %+v", other)
	}
}

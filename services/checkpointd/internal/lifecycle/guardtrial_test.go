package lifecycle

import (
	"bytes"
	"errors"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/guard"
)

func TestDesiredAndActivatingTrials(t *testing.T) {
	good := []byte("kind: KubeletConfiguration\nmaxPods: 50\n")
	const target = "/etc/kubernetes/kubelet.conf.d/50-nodeconfig.conf"
	x := &nodeconfigv1.ConfigSource{Namespace: "kube-system", Name: "kubelet", Uid: "x", ResourceVersion: "2", Key: "kubelet"}
	y := &nodeconfigv1.ConfigSource{Namespace: "kube-system", Name: "kubelet", Uid: "y", ResourceVersion: "9", Key: "kubelet"}
	payloads := map[string][]byte{"y": good}
	read := func(src *nodeconfigv1.ConfigSource) ([]byte, error) {
		if p, ok := payloads[src.GetUid()]; ok {
			return p, nil
		}
		return nil, errors.New("no checkpoint")
	}
	assigned := func(s *nodeconfigv1.ConfigSource) *nodeconfigv1.AssignedRecord {
		return &nodeconfigv1.AssignedRecord{Source: s, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}
	}
	active := func(s *nodeconfigv1.ConfigSource) *nodeconfigv1.SourceRecord {
		return &nodeconfigv1.SourceRecord{Source: s}
	}
	late := &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE}}

	for _, tc := range []struct {
		name                string
		r                   *nodeconfigv1.Records
		desired, activating string // uid on trial, "" for none
		lkg                 []byte
	}{
		{name: "local default", r: &nodeconfigv1.Records{}},
		{name: "soaking over last-known-good", r: &nodeconfigv1.Records{Assigned: assigned(x), Active: active(x), LastKnownGood: active(y)}, desired: "x", activating: "x", lkg: good},
		{name: "first trial: back to the local default", r: &nodeconfigv1.Records{Assigned: assigned(x), Active: active(x)}, desired: "x", activating: "x"},
		{name: "promoted", r: &nodeconfigv1.Records{Assigned: assigned(x), Active: active(x), LastKnownGood: active(x)}},
		{name: "rolled back", r: &nodeconfigv1.Records{Assigned: assigned(x), Active: active(y), LastKnownGood: active(y), Error: late,
			Failed: []*nodeconfigv1.FailedVersion{{Source: x, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}}}},
		{name: "rolled back to the local default", r: &nodeconfigv1.Records{Assigned: assigned(x), Error: late,
			Failed: []*nodeconfigv1.FailedVersion{{Source: x, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}}}},
		{name: "assigned, not yet active", r: &nodeconfigv1.Records{Assigned: assigned(x), Active: active(y), LastKnownGood: active(y)}, activating: "x", lkg: good},
		{name: "activation of x over trial y failed to write", r: &nodeconfigv1.Records{Assigned: assigned(x), Active: active(y)}, desired: "y", activating: "x"},
		{name: "back to last-known-good is no trial", r: &nodeconfigv1.Records{Assigned: assigned(y), Active: active(x), LastKnownGood: active(y)}, desired: "x", lkg: good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fn := range []struct {
				name string
				f    func(*nodeconfigv1.Records, string, payloadFunc) (*guard.Trial, error)
				want string
			}{{"desiredTrial", desiredTrial, tc.desired}, {"activatingTrial", activatingTrial, tc.activating}} {
				tr, err := fn.f(tc.r, target, read)
				if err != nil {
					t.Fatalf("%s: %v", fn.name, err)
				}
				if fn.want == "" {
					if tr != nil {
						t.Fatalf("%s: trial %+v, want none", fn.name, tr)
					}
					continue
				}
				if tr == nil || tr.Identity.UID != fn.want || tr.Target != target || tr.Threshold != guard.DefaultThreshold || !bytes.Equal(tr.LastKnownGood, tc.lkg) || (tr.LastKnownGood == nil) != (tc.lkg == nil) {
					t.Fatalf("%s: trial %+v, want %s with last-known-good %q", fn.name, tr, fn.want, tc.lkg)
				}
			}
		})
	}

	// A last-known-good that does not load is the caller's to decide.
	payloads = map[string][]byte{}
	r := &nodeconfigv1.Records{Assigned: assigned(x), Active: active(x), LastKnownGood: active(y)}
	if _, err := desiredTrial(r, target, read); err == nil {
		t.Fatal("no error for a last-known-good that does not load")
	}
	tr, err := desiredTrial(r, target, func(*nodeconfigv1.ConfigSource) ([]byte, error) { return nil, nil })
	if err != nil || tr == nil || tr.LastKnownGood != nil || tr.Restored() != "the local default" {
		t.Fatalf("trial %+v, %v; want the local default as its way back", tr, err)
	}
	// A relative target is refused: the guard writes it as root.
	if _, err := desiredTrial(r, "50-nodeconfig.conf", read); err == nil {
		t.Fatal("a relative target is accepted")
	}
}

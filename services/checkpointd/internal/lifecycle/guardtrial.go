package lifecycle

import (
	"fmt"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/guard"
)

// payloadFunc reads a stored config's payload as the drop-in holds it. The
// agent's own policy for a last-known-good that does not load goes here:
// returning nil, nil makes the trial fall back to the local default, as a
// rollback does.
type payloadFunc func(src *nodeconfigv1.ConfigSource) ([]byte, error)

// trialIdentity names src's trial.
func trialIdentity(src *nodeconfigv1.ConfigSource) guard.Identity {
	return guard.Identity{
		Namespace: src.GetNamespace(), Name: src.GetName(), UID: src.GetUid(),
		ResourceVersion: src.GetResourceVersion(), Key: src.GetKey(),
	}
}

// desiredTrial is the trial the records stand for, nil for none: the active
// config while it is not last-known-good. That is records.Soaking(r) in every
// settled state, and also covers the moments it does not (an activation
// whose write failed, an assignment kept off by its late mark): whatever is
// active and unproven is what the kubelet may fail to start on.
func desiredTrial(r *nodeconfigv1.Records, target string, lkg payloadFunc) (*guard.Trial, error) {
	active := r.GetActive().GetSource()
	if active == nil || records.SameSource(active, r.GetLastKnownGood().GetSource()) {
		return nil, nil
	}
	return trialOf(active, r, target, lkg)
}

// activatingTrial is the trial that activating the assigned config starts, nil
// for none: the agent sets it before the drop-in holds the config, so that
// no kubelet start on it is unguarded, even one a crash of the agent lets
// happen before the records say it is active.
func activatingTrial(r *nodeconfigv1.Records, target string, lkg payloadFunc) (*guard.Trial, error) {
	a := r.GetAssigned()
	src := a.GetSource()
	if src == nil || records.SameSource(src, r.GetLastKnownGood().GetSource()) || records.FailedLate(r, src, a.GetValidator()) != nil {
		return nil, nil
	}
	return trialOf(src, r, target, lkg)
}

func trialOf(src *nodeconfigv1.ConfigSource, r *nodeconfigv1.Records, target string, lkg payloadFunc) (*guard.Trial, error) {
	t := &guard.Trial{Identity: trialIdentity(src), Target: target, Threshold: guard.DefaultThreshold}
	if good := r.GetLastKnownGood().GetSource(); good != nil {
		payload, err := lkg(good)
		if err != nil {
			return nil, fmt.Errorf("read last-known-good %s for the start guard: %w", records.Describe(good), err)
		}
		t.LastKnownGood = payload
		if payload != nil {
			t.LastKnownGoodName = records.Describe(good)
		}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

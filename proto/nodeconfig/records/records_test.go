package records

import (
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func src(rv string) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: rv, Key: "k"}
}

// soaking is a node with src("2") assigned and active for a 100s soak since
// t0, and src("1") last-known-good.
func soaking() *nodeconfigv1.Records {
	return &nodeconfigv1.Records{
		Assigned:      &nodeconfigv1.AssignedRecord{Source: src("2"), SoakSeconds: 100, Validator: nodeconfigv1.Validator_VALIDATOR_YAML},
		Active:        &nodeconfigv1.SourceRecord{Source: src("2"), WrittenAt: timestamppb.New(t0)},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("1"), WrittenAt: timestamppb.New(t0.Add(-time.Hour))},
	}
}

func TestSoakWithoutConsumerCountsFromActivation(t *testing.T) {
	r := soaking()
	if !Soaking(r) {
		t.Fatal("not soaking")
	}
	if got := SoakStart(r); !got.Equal(t0) {
		t.Fatalf("SoakStart %s, want %s", got, t0)
	}
	if got, want := SoakEnd(r), t0.Add(100*time.Second); !got.Equal(want) {
		t.Fatalf("SoakEnd %s, want %s", got, want)
	}
	if SoakOver(r, t0.Add(99*time.Second)) || !SoakOver(r, t0.Add(100*time.Second)) {
		t.Fatal("SoakOver does not turn at SoakEnd")
	}
}

func TestSoakWithConsumerCountsOnlyHealthyTime(t *testing.T) {
	r := soaking()
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING}
	if !SoakStart(r).IsZero() || !SoakEnd(r).IsZero() || SoakOver(r, t0.Add(time.Hour)) {
		t.Fatal("the soak began before the consumer was healthy")
	}
	healthy := t0.Add(time.Minute)
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src("2"), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY,
		Since: timestamppb.New(healthy), HealthyBefore: durationpb.New(30 * time.Second)}
	if got, want := SoakStart(r), healthy.Add(-30*time.Second); !got.Equal(want) {
		t.Fatalf("SoakStart %s, want %s", got, want)
	}
	r.Consumer.Source = src("1")
	if !SoakStart(r).IsZero() {
		t.Fatal("the soak counts the consumer's health on another config")
	}
}

func TestSoakingEndsAtPromotionOrLateError(t *testing.T) {
	r := soaking()
	r.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: ReasonConsumerUnhealthy}}
	if Soaking(r) || SoakOver(r, t0.Add(time.Hour)) {
		t.Fatal("a config that failed late still soaks")
	}
	r = soaking()
	r.LastKnownGood.Source = src("2")
	if Soaking(r) {
		t.Fatal("last-known-good still soaks")
	}
	if Soaking(&nodeconfigv1.Records{}) {
		t.Fatal("the local default soaks with nothing assigned")
	}
}

func TestResetSoak(t *testing.T) {
	r := &nodeconfigv1.Records{LastReset: &nodeconfigv1.ResetRecord{At: timestamppb.New(t0), SoakSeconds: 60}}
	if got, want := ResetSoakEnd(r), t0.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("ResetSoakEnd %s, want %s", got, want)
	}
	if !ResetSoaking(r, t0.Add(59*time.Second)) || ResetSoaking(r, t0.Add(time.Minute)) {
		t.Fatal("ResetSoaking does not turn at ResetSoakEnd")
	}
	r.Consumer = &nodeconfigv1.ConsumerRecord{Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_WAITING}
	if !ResetSoakEnd(r).IsZero() || !ResetSoaking(r, t0.Add(time.Hour)) {
		t.Fatal("a reset whose soak has not begun is not on trial")
	}
	r.Assigned = &nodeconfigv1.AssignedRecord{Source: src("1")}
	if ResetSoaking(r, t0) {
		t.Fatal("a reset is still on trial after an assignment")
	}
}

func TestFailedLateAndRollbackUnfinished(t *testing.T) {
	r := soaking()
	if FailedLate(r, src("2"), nodeconfigv1.Validator_VALIDATOR_YAML) != nil || RollbackUnfinished(r) {
		t.Fatal("a version nothing marked failed")
	}
	r.Failed = []*nodeconfigv1.FailedVersion{{Source: src("2"), Validator: nodeconfigv1.Validator_VALIDATOR_YAML}}
	if FailedLate(r, src("2"), nodeconfigv1.Validator_VALIDATOR_YAML) == nil {
		t.Fatal("the mark is not found")
	}
	if FailedLate(r, src("2"), nodeconfigv1.Validator_VALIDATOR_KUBELET) != nil {
		t.Fatal("a mark counts for another validator")
	}
	if !RollbackUnfinished(r) {
		t.Fatal("the failed version is active, yet the rollback is done")
	}
	r.Active.Source = src("1")
	if RollbackUnfinished(r) {
		t.Fatal("last-known-good is active, yet the rollback is unfinished")
	}
}

func TestStatusAndDescribe(t *testing.T) {
	r := soaking()
	r.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Message: "boom"}}
	s := Status(r)
	if !SameSource(s.GetAssigned(), src("2")) || !SameSource(s.GetActive(), src("2")) || !SameSource(s.GetLastKnownGood(), src("1")) || s.GetError() != "boom" {
		t.Fatalf("Status %v", s)
	}
	if got := Describe(nil); got != "the local default" {
		t.Fatalf("Describe(nil) %q", got)
	}
	if got, want := Describe(src("7")), "ConfigMap ns/cm key k (resourceVersion 7)"; got != want {
		t.Fatalf("Describe %q, want %q", got, want)
	}
	if SameSource(src("1"), src("2")) || !SameSource(nil, nil) || SameSource(nil, src("1")) {
		t.Fatal("SameSource")
	}
}

// SameSource compares ConfigSource's fields one by one: each must tell two
// sources apart, a field added to the message too.
func TestSameSourceComparesEveryField(t *testing.T) {
	fields := (&nodeconfigv1.ConfigSource{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		other := src("1")
		other.ProtoReflect().Set(fields.Get(i), protoreflect.ValueOfString("other"))
		if SameSource(src("1"), other) {
			t.Errorf("SameSource ignores %s", fields.Get(i).Name())
		}
	}
}

func TestNodeClears(t *testing.T) {
	for reason, want := range map[string]bool{
		ReasonWriteFailed: true, ReasonKubeletNoConfigDir: true,
		ReasonNodeFilesUnreadable: false, ReasonConsumerUnhealthy: false, "DownloadFailed": false,
	} {
		if got := NodeClears(reason); got != want {
			t.Errorf("NodeClears(%s) = %v, want %v", reason, got, want)
		}
	}
}

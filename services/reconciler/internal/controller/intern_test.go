package controller

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/utils/lru"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Two nodes' records of the same config keep its source once; another
// config's source, and one with fields this build does not know, are kept
// as they came.
func TestRecordsOfTheSameConfigShareTheirSource(t *testing.T) {
	c := &Controller{sources: lru.New(16)}
	src := func(rv string) *nodeconfigv1.ConfigSource {
		return &nodeconfigv1.ConfigSource{Namespace: strings.Repeat("ns", 2), Name: strings.Repeat("cm", 2),
			Uid: strings.Repeat("u", 8), ResourceVersion: rv, Key: strings.Repeat("k", 4)}
	}
	records := func() *nodeconfigv1.Records {
		return &nodeconfigv1.Records{Assigned: &nodeconfigv1.AssignedRecord{Source: src("8")},
			Active: &nodeconfigv1.SourceRecord{Source: src("7")}, LastKnownGood: &nodeconfigv1.SourceRecord{Source: src("7")},
			LastReset: &nodeconfigv1.ResetRecord{From: src("8")}}
	}
	a, b := records(), records()
	c.internSources(a)
	c.internSources(b)
	if a.Active.Source != b.LastKnownGood.Source || a.Active.Source != a.LastKnownGood.Source || a.Assigned.Source != b.LastReset.From {
		t.Error("one config's source is kept more than once")
	}
	if a.Active.Source == a.Assigned.Source || a.Assigned.Source.ResourceVersion != "8" || a.Active.Source.ResourceVersion != "7" {
		t.Errorf("two configs share a source: assigned %v, active %v", a.Assigned.Source, a.Active.Source)
	}
	newer := src("7")
	newer.ProtoReflect().SetUnknown(protowire.AppendTag(nil, 99, protowire.VarintType))
	n := &nodeconfigv1.Records{Active: &nodeconfigv1.SourceRecord{Source: newer}}
	c.internSources(n)
	if n.Active.Source != newer {
		t.Error("a source with unknown fields was swapped for one without them")
	}
	c.internSources(&nodeconfigv1.Records{}) // no sources: nothing to do, no panic
}

package controller

import (
	"strings"
	"testing"
	"unsafe"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/reconciler/internal/intern"
)

// Two nodes' records of the same config keep its strings once.
func TestRecordsOfTheSameConfigShareTheirStrings(t *testing.T) {
	c := &Controller{sources: intern.New(16)}
	records := func() *nodeconfigv1.Records {
		src := func() *nodeconfigv1.ConfigSource {
			return &nodeconfigv1.ConfigSource{Namespace: strings.Repeat("ns", 2), Name: strings.Repeat("cm", 2),
				Uid: strings.Repeat("u", 8), ResourceVersion: strings.Repeat("7", 3), Key: strings.Repeat("k", 4)}
		}
		return &nodeconfigv1.Records{Assigned: &nodeconfigv1.AssignedRecord{Source: src()},
			Active: &nodeconfigv1.SourceRecord{Source: src()}, LastKnownGood: &nodeconfigv1.SourceRecord{Source: src()}}
	}
	a, b := records(), records()
	c.internSources(a)
	c.internSources(b)
	for _, pair := range [][2]string{
		{a.Assigned.Source.Uid, b.Active.Source.Uid}, {a.Active.Source.Name, b.LastKnownGood.Source.Name},
		{a.LastKnownGood.Source.ResourceVersion, b.Assigned.Source.ResourceVersion}, {a.Assigned.Source.Key, b.Assigned.Source.Key},
		{a.Assigned.Source.Namespace, b.LastKnownGood.Source.Namespace},
	} {
		if pair[0] != pair[1] || unsafe.StringData(pair[0]) != unsafe.StringData(pair[1]) {
			t.Errorf("%q is kept twice", pair[0])
		}
	}
	c.internSources(&nodeconfigv1.Records{}) // no sources: nothing to do, no panic
}

// Package rollout is the reconciler's rollout bookkeeping: which nodes hold
// a place in each NodeConfig's trial, which leave a NodeConfig, which wait
// for a freed place, and which rolled back from which version, with each
// NodeConfig generation's rollout settings parsed once. A Book answers
// admission (may this node start a trial now?) from these indexes, so a
// node sync costs the same whatever the fleet's size.
//
// The Book has its own lock and calls nothing outside itself while holding
// it: a caller may hold its own lock when it calls the Book, never the
// other way round.
package rollout

import (
	"sync"
	"time"

	"k8s.io/utils/lru"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Book is the rollout state of every node and NodeConfig.
type Book struct {
	now func() time.Time

	mu    sync.Mutex
	seats map[string]*seat
	// trials indexes the nodes on trial or rolled back by the NodeConfig
	// they are on.
	trials map[string]*trialIndex
	// departing indexes the nodes by the NodeConfig they leave.
	departing map[string]set
	// waiting indexes the nodes pacing holds back by the NodeConfigs
	// whose freed place may start them.
	waiting  map[string]set
	policies *lru.Cache // policyKey -> *Policy
}

// New makes an empty Book reading the time from now.
func New(now func() time.Time) *Book {
	return &Book{
		now:       now,
		seats:     map[string]*seat{},
		trials:    map[string]*trialIndex{},
		departing: map[string]set{},
		waiting:   map[string]set{},
		policies:  lru.New(maxPolicies),
	}
}

// Facts are what a node's last sync found: what places are decided on.
type Facts struct {
	State      nodeconfigv1.LifecycleState
	NodeConfig string
	Records    *nodeconfigv1.Records
}

// seat is one node's entry.
type seat struct {
	Facts
	// admitted marks a node pacing let start a trial (or a departure)
	// that has not ended; admittedFor names the NodeConfig whose trial it
	// is ("" for a departure, counted by departing).
	admitted    bool
	admittedFor string
	// departingFrom names the NodeConfig the node is leaving: its reset
	// waits for, or holds, a place in that NodeConfig's trial.
	departingFrom string
	// at is where the indexes count the node now.
	at position
}

// seatLocked returns the node's entry, making it on first use.
func (b *Book) seatLocked(node string) *seat {
	s := b.seats[node]
	if s == nil {
		s = &seat{}
		b.seats[node] = s
	}
	return s
}

// Remembered names the NodeConfigs the node was last known to leave and to
// follow, in that order ("" for none).
func (b *Book) Remembered(node string) (departingFrom, following string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.seats[node]; s != nil {
		return s.departingFrom, s.NodeConfig
	}
	return "", ""
}

package rollout

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
)

// Policy is one NodeConfig generation's rollout settings, parsed: every
// node sync asks for them, and the windows' time zones are costly to load.
type Policy struct {
	maxInTrial *intstr.IntOrString
	// MaxFailures is how many rollbacks of one version halt it (0 never).
	MaxFailures int
	// SoakSeconds is how long a change soaks, defaulted.
	SoakSeconds int64
	Paused      bool
	Windows     pacing.Windows
	// WindowsErr says why a window does not parse: no trial starts then.
	WindowsErr error
	// Health is the NodeConfig's own health gates, as the nodes get them.
	Health *nodeconfigv1.HealthGates
	// HealthErr says why they cannot be gates (the CEL expression does
	// not compile): no trial starts then.
	HealthErr error
	// Drain is the NodeConfig's drains, as the nodes get them (nil: only
	// when a changed field needs one, within the nodes' default bound).
	Drain *nodeconfigv1.DrainPolicy
}

// MaxInTrial is how many of total nodes may be on trial at once.
func (p *Policy) MaxInTrial(total int) int { return pacing.MaxInTrial(p.maxInTrial, total) }

// TakesEveryNode says the trial's limit is every node, however many there
// turn out to be: maxInTrial a percentage of 100 or more. Such a trial has
// a place for each node whatever the nodes not seen yet hold.
func (p *Policy) TakesEveryNode() bool {
	v := p.maxInTrial
	if v == nil || v.Type != intstr.String {
		return false
	}
	pct, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	return err == nil && strings.HasSuffix(v.StrVal, "%") && pct >= 100
}

// ParsePolicy reads nc's rollout settings.
func ParsePolicy(nc *v1alpha1.NodeConfig) *Policy {
	p := &Policy{
		maxInTrial:  nc.Spec.Rollout.MaxInTrial,
		MaxFailures: pacing.MaxFailures(nc.Spec.Rollout.MaxFailures),
		SoakSeconds: nc.Spec.SoakSeconds,
		Paused:      nc.Spec.Rollout.Paused,
	}
	if p.SoakSeconds == 0 {
		p.SoakSeconds = v1alpha1.DefaultSoakSeconds
	}
	p.Health, p.HealthErr = healthGates(nc.Spec.Health)
	if d := nc.Spec.Rollout.Drain; d != nil {
		p.Drain = &nodeconfigv1.DrainPolicy{Always: d.When == v1alpha1.DrainAlways, TimeoutSeconds: d.TimeoutSeconds}
	}
	for i, w := range nc.Spec.Rollout.Windows {
		pw, err := pacing.ParseWindow(w.Days, w.Start, w.End, w.TimeZone)
		if err != nil {
			p.Windows, p.WindowsErr = nil, fmt.Errorf("window %d: %w", i, err)
			break
		}
		p.Windows = append(p.Windows, pw)
	}
	return p
}

// maxPolicies bounds the cache; the least recently used (old generations,
// deleted NodeConfigs) go first, and are cheap to parse again.
const maxPolicies = 1024

type policyKey struct {
	uid        types.UID
	name       string
	generation int64
}

// Policy is nc's rollout settings, parsed once per generation (the spec
// changes only with it). It is shared: callers must not change it.
func (b *Book) Policy(nc *v1alpha1.NodeConfig) *Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policyLocked(nc)
}

func (b *Book) policyLocked(nc *v1alpha1.NodeConfig) *Policy {
	key := policyKey{nc.UID, nc.Name, nc.Generation}
	if p, ok := b.policies.Get(key); ok {
		return p.(*Policy)
	}
	p := ParsePolicy(nc)
	b.policies.Add(key, p)
	return p
}

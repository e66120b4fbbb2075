package rollout

import (
	"fmt"
	"time"

	"nodeconfig.io/services/api/v1alpha1"
)

// Hold is why a NodeConfig starts no new trial now (and no kubelet restart
// that one would bring); the zero Hold lets trials start.
type Hold struct {
	Reason  string
	Message string
	// Next is when the next maintenance window opens (outside one).
	Next time.Time
}

// Held decides whether nc may start a trial (or a departure) now: not
// while paused, not outside its maintenance windows, not while a window
// does not parse. Nodes already soaking finish and promote.
func (b *Book) Held(nc *v1alpha1.NodeConfig) Hold {
	return b.Policy(nc).hold(b.now())
}

func (p *Policy) hold(now time.Time) Hold {
	switch {
	case p.WindowsErr != nil:
		return Hold{Reason: v1alpha1.ReasonInvalidWindow, Message: fmt.Sprintf("spec.rollout.windows: %v; no trial starts until it is fixed", p.WindowsErr)}
	case p.HealthErr != nil:
		return Hold{Reason: v1alpha1.ReasonInvalidHealthGate, Message: fmt.Sprintf("%v; no trial starts until it is fixed", p.HealthErr)}
	case p.Paused:
		return Hold{Reason: v1alpha1.ReasonPaused, Message: "spec.rollout.paused: no new trial starts; nodes soaking finish and promote"}
	}
	if open, next := p.Windows.Open(now); !open {
		return Hold{Reason: v1alpha1.ReasonOutsideWindow, Next: next,
			Message: fmt.Sprintf("outside every maintenance window: no trial and no kubelet restart until the next one opens at %s", next.Format(time.RFC3339))}
	}
	return Hold{}
}

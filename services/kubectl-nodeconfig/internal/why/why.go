// Package why explains, in sentences, why a node is where it is: who selects
// it, what it says of itself, what the reconciler says, what holds its
// NodeConfig's rollout, and the recent warnings about it.
package why

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodeconfigs"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/nodestatus"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

// MaxWarnings is how many of the latest warnings are shown.
const MaxWarnings = 10

// Input is what why reads.
type Input struct {
	Node        *corev1.Node
	NodeConfigs []v1alpha1.NodeConfig
	Reconciler  report.Reconciler
	// State is the reconciler's GetNode; nil when it was not reachable or
	// did not answer, which StateError then says.
	State      *nodeconfigv1.NodeState
	StateError string
	// Events about the node; only its Warnings are shown.
	Events []corev1.Event
	Now    time.Time
}

// Explanation is the output; its JSON is `why -o json`.
type Explanation struct {
	Node string `json:"node"`
	// SelectedBy names the NodeConfigs whose selector matches the node.
	SelectedBy []string `json:"selectedBy"`
	// Condition is NodeConfigReady; null until statusd reports.
	Condition *report.Condition `json:"condition"`
	// Reported is false while the node has no readable annotation.
	Reported      bool              `json:"reported"`
	Assigned      *report.Version   `json:"assigned"`
	Active        *report.Version   `json:"active"`
	LastKnownGood *report.Version   `json:"lastKnownGood"`
	Error         string            `json:"error"`
	Reconciler    report.Reconciler `json:"reconciler"`
	// ReconcilerNode is the reconciler's GetNode; absent when unknown.
	ReconcilerNode *ReconcilerNode `json:"reconcilerNode,omitempty"`
	// NodeConfig is the one NodeConfig selecting the node; absent when
	// none or several do.
	NodeConfig *NodeConfig `json:"nodeConfig,omitempty"`
	// Warnings are the latest Warning events about the node, newest first.
	Warnings []Event `json:"warnings"`
	// Sentences are the explanation as the text output prints it.
	Sentences []string `json:"sentences"`
}

// ReconcilerNode is the reconciler's view of the node.
type ReconcilerNode struct {
	NodeConfig    string     `json:"nodeConfig"`
	State         string     `json:"state"`
	Error         string     `json:"error"`
	Failures      int32      `json:"failures"`
	Backoff       string     `json:"backoff,omitempty"`
	NextReconcile *time.Time `json:"nextReconcile,omitempty"`
	SoakEnds      *time.Time `json:"soakEnds,omitempty"`
}

// NodeConfig is the selecting NodeConfig's side.
type NodeConfig struct {
	Name               string                       `json:"name"`
	Paused             bool                         `json:"paused"`
	Ready              *report.Condition            `json:"ready"`
	Progressing        *report.Condition            `json:"progressing"`
	Degraded           *report.Condition            `json:"degraded"`
	NextWindow         *time.Time                   `json:"nextWindow,omitempty"`
	RolledBackVersions []v1alpha1.RolledBackVersion `json:"rolledBackVersions,omitempty"`
}

// Event is one Warning event about the node.
type Event struct {
	Time    time.Time `json:"time"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count"`
}

// Explain builds the explanation.
func Explain(in Input) Explanation {
	n := in.Node
	ns := nodestatus.Read(n)
	e := Explanation{
		Node: n.Name, SelectedBy: []string{}, Condition: ns.Condition, Reported: ns.Reported,
		Assigned: ns.Assigned, Active: ns.Active, LastKnownGood: ns.LastKnownGood, Error: ns.Error,
		Reconciler: in.Reconciler, Warnings: warnings(n.Name, in.Events), Sentences: []string{},
	}
	say := func(format string, args ...any) { e.Sentences = append(e.Sentences, fmt.Sprintf(format, args...)) }

	var selecting []*v1alpha1.NodeConfig
	for i := range in.NodeConfigs {
		if nodeconfigs.Selects(&in.NodeConfigs[i], n.Labels) {
			selecting = append(selecting, &in.NodeConfigs[i])
			e.SelectedBy = append(e.SelectedBy, in.NodeConfigs[i].Name)
		}
	}
	switch len(selecting) {
	case 0:
		if ns.Assigned != nil {
			say("%s is selected by no NodeConfig, but still has %s assigned: it returns to its local default at the pace of the NodeConfig it left.", n.Name, ns.Assigned.Sentence())
		} else {
			say("%s is selected by no NodeConfig: it runs its local default.", n.Name)
		}
	case 1:
		nc := selecting[0]
		say("%s is selected by NodeConfig %s (nodeSelector %s), which wants %s.", n.Name, nc.Name, nodeconfigs.SelectorText(nc), wants(nc))
	default:
		say("%s is selected by %d NodeConfigs (%s): a conflict, so the reconciler leaves the node unchanged until exactly one selects it.",
			n.Name, len(selecting), strings.Join(e.SelectedBy, ", "))
	}

	// The node's own account.
	if c := ns.Condition; c == nil {
		say("It has no %s condition: statusd has not reported on it yet (is the agent running on the node?).", v1alpha1.NodeConditionConfigReady)
	} else {
		s := fmt.Sprintf("Its %s condition is %s with reason %s", v1alpha1.NodeConditionConfigReady, c.Status, c.Reason)
		if c.Since != nil {
			s += " since " + report.When(*c.Since, in.Now)
		}
		if m := nodestatus.Meaning(c.Reason); m != "" {
			s += ": " + m
		}
		say("%s.", s)
		if c.Message != "" {
			say("The node says: %s.", trim(c.Message))
		}
	}
	switch {
	case ns.Unreadable != "":
		say("Its %s.", ns.Unreadable)
	case !ns.Reported:
		say("It has no %s annotation yet.", v1alpha1.NodeAnnotationConfigStatus)
	default:
		say("%s", versions(ns.Assigned, ns.Active, ns.LastKnownGood))
	}
	if ns.Error != "" {
		say("Its error: %s.", trim(ns.Error))
	}

	// The reconciler's account.
	st := in.State
	switch {
	case !in.Reconciler.Reachable:
		say("The reconciler was not reachable (%s): the rest is what the Kubernetes API shows.", trim(in.Reconciler.Error))
	case st == nil:
		say("The reconciler (%s) does not say: %s.", in.Reconciler.Via, trim(in.StateError))
	default:
		e.ReconcilerNode = reconcilerNode(st)
		s := fmt.Sprintf("The reconciler sees it as %s", report.State(st.GetState()))
		if m := report.StateMeaning(st.GetState()); m != "" {
			s += " (" + m + ")"
		}
		if st.GetNodeConfig() != "" && (len(selecting) != 1 || selecting[0].Name != st.GetNodeConfig()) {
			s += " under NodeConfig " + st.GetNodeConfig()
		}
		say("%s.", s)
		if e.ReconcilerNode.SoakEnds != nil {
			say("Its trial ends at %s; its config then becomes last-known-good.", report.When(*e.ReconcilerNode.SoakEnds, in.Now))
		}
		if st.GetError() != "" {
			s := fmt.Sprintf("Its last sync failed (%d in a row): %s", st.GetFailures(), trim(st.GetError()))
			if e.ReconcilerNode.Backoff != "" {
				s += "; it is retried after a backoff of " + e.ReconcilerNode.Backoff
			}
			say("%s.", s)
		}
		if e.ReconcilerNode.NextReconcile != nil {
			say("It is reconciled next at %s.", report.When(*e.ReconcilerNode.NextReconcile, in.Now))
		}
	}

	// The rollout's account.
	if len(selecting) == 1 {
		e.NodeConfig = nodeConfig(selecting[0])
		for _, s := range rollout(selecting[0], n.Name, st, in.Now) {
			say("%s", s)
		}
	}

	if len(e.Warnings) == 0 {
		say("There are no Warning events about %s (events are kept an hour by default).", n.Name)
	} else {
		say("Its latest Warning events follow, newest first.")
	}
	return e
}

func wants(nc *v1alpha1.NodeConfig) string {
	cm := nodeconfigs.ConfigMapOf(nc)
	if cm == nil {
		return "the nodes' local default"
	}
	v := nc.Spec.Validator
	if v == "" {
		v = "yaml"
	}
	if r := nc.Spec.Source.Revision; r != nil {
		// Undone: the revision's bytes, whatever the ConfigMap holds now.
		return fmt.Sprintf("revision %d of its history, once read from ConfigMap %s/%s key %s (validator %s; kubectl nodeconfig history %s)", *r, cm.Namespace, cm.Name, cm.Key, v, nc.Name)
	}
	return fmt.Sprintf("ConfigMap %s/%s key %s (validator %s)", cm.Namespace, cm.Name, cm.Key, v)
}

// rollout explains what the NodeConfig's conditions say about the node.
func rollout(nc *v1alpha1.NodeConfig, node string, st *nodeconfigv1.NodeState, now time.Time) []string {
	var out []string
	say := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	state := nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED
	if st != nil {
		state = st.GetState()
	}
	waiting := state == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING
	because := func(s string) string {
		if waiting {
			return s + "; that is why this node waits"
		}
		return s
	}
	ready := nodeconfigs.Condition(nc, v1alpha1.ConditionReady)
	prog := nodeconfigs.Condition(nc, v1alpha1.ConditionProgressing)
	deg := nodeconfigs.Condition(nc, v1alpha1.ConditionDegraded)
	if ready == nil && prog == nil && deg == nil {
		say("NodeConfig %s has no status yet: the reconciler has not synced it.", nc.Name)
		return out
	}

	if nc.Spec.Rollout.Paused {
		say("NodeConfig %s is paused (spec.rollout.paused): no new trial starts, and nodes soaking finish their soak and promote%s. `kubectl nodeconfig resume %s` resumes it.",
			nc.Name, because(""), nc.Name)
	}
	if prog != nil {
		switch prog.Reason {
		case v1alpha1.ReasonPaused:
			if !nc.Spec.Rollout.Paused {
				say("NodeConfig %s is resumed, but its status still says Paused: the reconciler has not observed the change yet.", nc.Name)
			}
		case v1alpha1.ReasonOutsideWindow:
			s := fmt.Sprintf("No maintenance window of NodeConfig %s is open: no trial starts and no drift repair restarts the kubelet", nc.Name)
			if nc.Status.NextWindow != nil {
				s += "; the next window opens at " + report.When(nc.Status.NextWindow.Time, now)
			}
			say("%s.", because(s))
		case v1alpha1.ReasonInvalidWindow:
			say("A maintenance window of NodeConfig %s does not parse: %s; no trial starts until it is fixed.", nc.Name, trim(prog.Message))
		case v1alpha1.ReasonRollingOut:
			if waiting && !nc.Spec.Rollout.Paused {
				say("It waits for a place in the rollout of NodeConfig %s (maxInTrial): %s.", nc.Name, trim(prog.Message))
			} else {
				say("NodeConfig %s is rolling out: %s.", nc.Name, trim(prog.Message))
			}
		}
	}
	if deg != nil && deg.Status == "True" {
		switch deg.Reason {
		case v1alpha1.ReasonRolloutHalted:
			s := fmt.Sprintf("The rollout of NodeConfig %s is halted: %s", nc.Name, trim(deg.Message))
			if state == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED {
				s += "; this node stays on its config until then"
			}
			say("%s.", s)
		case v1alpha1.ReasonConfigRefused:
			say("The reconciler refuses the current config of NodeConfig %s before any node gets it: %s. This node keeps its config until the ConfigMap is fixed.", nc.Name, trim(deg.Message))
		case v1alpha1.ReasonValidationUnavailable:
			say("The reconciler cannot run the validator of NodeConfig %s, so its current config waits and no node gets it: %s. This node keeps its config; the reconciler tries again by itself.", nc.Name, trim(deg.Message))
		default:
			say("NodeConfig %s is Degraded (%s): %s.", nc.Name, deg.Reason, trim(deg.Message))
		}
	}
	for _, v := range nc.Status.RolledBackVersions {
		s := fmt.Sprintf("resourceVersion %s (key %s, validator %s) rolled back on %s", v.ResourceVersion, v.Key, v.Validator, strings.Join(v.Nodes, ", "))
		if slices.Contains(v.Nodes, node) {
			s += ", this node among them"
		}
		say("Of NodeConfig %s, %s.", nc.Name, s)
	}
	if ready != nil && ready.Status == "True" {
		say("NodeConfig %s is Ready (%s): %s.", nc.Name, ready.Reason, trim(ready.Message))
	}
	return out
}

func nodeConfig(nc *v1alpha1.NodeConfig) *NodeConfig {
	out := &NodeConfig{
		Name: nc.Name, Paused: nc.Spec.Rollout.Paused,
		Ready:              report.FromMeta(nodeconfigs.Condition(nc, v1alpha1.ConditionReady)),
		Progressing:        report.FromMeta(nodeconfigs.Condition(nc, v1alpha1.ConditionProgressing)),
		Degraded:           report.FromMeta(nodeconfigs.Condition(nc, v1alpha1.ConditionDegraded)),
		RolledBackVersions: nc.Status.RolledBackVersions,
	}
	if nc.Status.NextWindow != nil {
		t := nc.Status.NextWindow.Time
		out.NextWindow = &t
	}
	return out
}

func reconcilerNode(st *nodeconfigv1.NodeState) *ReconcilerNode {
	out := &ReconcilerNode{NodeConfig: st.GetNodeConfig(), State: report.State(st.GetState()), Error: st.GetError(), Failures: st.GetFailures()}
	if b := st.GetBackoff(); b != nil && b.AsDuration() > 0 {
		out.Backoff = b.AsDuration().String()
	}
	if t := st.GetNextReconcileTime(); t != nil {
		v := t.AsTime()
		out.NextReconcile = &v
	}
	if t := st.GetSoakEndsTime(); t != nil {
		v := t.AsTime()
		out.SoakEnds = &v
	}
	return out
}

// warnings keeps the node's Warning events, newest first, at most
// MaxWarnings.
func warnings(node string, events []corev1.Event) []Event {
	out := []Event{}
	for _, ev := range events {
		if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != node {
			continue
		}
		count := ev.Count
		if ev.Series != nil && ev.Series.Count > count {
			count = ev.Series.Count
		}
		if count == 0 {
			count = 1
		}
		out = append(out, Event{Time: eventTime(&ev), Reason: ev.Reason, Message: ev.Message, Count: count})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if len(out) > MaxWarnings {
		out = out[:MaxWarnings]
	}
	return out
}

func eventTime(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.FirstTimestamp.IsZero():
		return ev.FirstTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

// versions says which versions the node has assigned, active and as
// last-known-good, naming the ConfigMap once when they share it.
func versions(assigned, active, lkg *report.Version) string {
	if sameVersion(assigned, active) && sameVersion(active, lkg) {
		return fmt.Sprintf("It has %s assigned, active and last-known-good.", assigned.Sentence())
	}
	var cm *report.Version
	for _, v := range []*report.Version{assigned, active, lkg} {
		switch {
		case v == nil:
		case cm == nil:
			cm = v
		case v.Namespace != cm.Namespace || v.Name != cm.Name || v.Key != cm.Key:
			return fmt.Sprintf("It has %s assigned, %s active and %s as last-known-good.", assigned.Sentence(), active.Sentence(), lkg.Sentence())
		}
	}
	rv := func(v *report.Version) string {
		if v == nil {
			return "the local default"
		}
		return v.ResourceVersion
	}
	return fmt.Sprintf("Of ConfigMap %s/%s key %s, it has resourceVersion %s assigned, %s active and %s as last-known-good.",
		cm.Namespace, cm.Name, cm.Key, rv(assigned), rv(active), rv(lkg))
}

func sameVersion(a, b *report.Version) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// trim drops a message's final period, the sentence adds its own.
func trim(s string) string {
	return strings.TrimRight(strings.TrimSpace(s), ".")
}

// Text prints the explanation for a person: one sentence a line, then the
// warnings.
func Text(w io.Writer, e Explanation, now time.Time) error {
	var b strings.Builder
	for _, s := range e.Sentences {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	for _, ev := range e.Warnings {
		count := ""
		if ev.Count > 1 {
			count = fmt.Sprintf(" (x%d)", ev.Count)
		}
		fmt.Fprintf(&b, "  %s  %s%s: %s\n", report.When(ev.Time, now), ev.Reason, count, strings.Join(strings.Fields(ev.Message), " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

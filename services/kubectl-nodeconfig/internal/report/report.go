// Package report holds what the plugin's outputs share: the JSON shapes of a
// condition, a config version and the reconciler's reachability, and how
// times and versions read in text.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Condition is a condition as the outputs show it.
type Condition struct {
	Type    string     `json:"type"`
	Status  string     `json:"status"`
	Reason  string     `json:"reason"`
	Message string     `json:"message"`
	Since   *time.Time `json:"since,omitempty"`
}

// FromMeta converts a NodeConfig's condition; nil stays nil.
func FromMeta(c *metav1.Condition) *Condition {
	if c == nil {
		return nil
	}
	out := &Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message}
	if !c.LastTransitionTime.IsZero() {
		t := c.LastTransitionTime.Time
		out.Since = &t
	}
	return out
}

// FromNode converts a Node's condition; nil stays nil.
func FromNode(c *corev1.NodeCondition) *Condition {
	if c == nil {
		return nil
	}
	out := &Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message}
	if !c.LastTransitionTime.IsZero() {
		t := c.LastTransitionTime.Time
		out.Since = &t
	}
	return out
}

// Short is "Status/Reason", "-" for a missing condition.
func (c *Condition) Short() string {
	if c == nil {
		return "-"
	}
	return c.Status + "/" + c.Reason
}

// Version is one pinned ConfigMap key, as in the node's config-status
// annotation. A nil *Version is the node's local default.
type Version struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Key             string `json:"key"`
}

// FromSource converts the annotation's source; nil (or no ConfigMap) is the
// local default.
func FromSource(s *corev1.NodeConfigSource) *Version {
	if s == nil || s.ConfigMap == nil {
		return nil
	}
	cm := s.ConfigMap
	return &Version{Namespace: cm.Namespace, Name: cm.Name, UID: string(cm.UID), ResourceVersion: cm.ResourceVersion, Key: cm.KubeletConfigKey}
}

// Text is the version as a column shows it: its resourceVersion when it is
// a version of the ConfigMap the NodeConfig names (namespace/name), else
// namespace/name@resourceVersion; "local" for the local default.
func (v *Version) Text(namespace, name string) string {
	if v == nil {
		return "local"
	}
	if v.Namespace == namespace && v.Name == name {
		return v.ResourceVersion
	}
	return fmt.Sprintf("%s/%s@%s", v.Namespace, v.Name, v.ResourceVersion)
}

// Sentence is the version in a sentence.
func (v *Version) Sentence() string {
	if v == nil {
		return "the local default"
	}
	return fmt.Sprintf("ConfigMap %s/%s key %s at resourceVersion %s", v.Namespace, v.Name, v.Key, v.ResourceVersion)
}

// Reconciler says whether the reconciler answered and through what.
type Reconciler struct {
	Reachable bool   `json:"reachable"`
	Via       string `json:"via,omitempty"`
	Error     string `json:"error,omitempty"`
}

// When is a time for a person: the clock time (with the date when it is not
// today) and how far it is from now.
func When(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	layout := "15:04:05"
	if t.Format(time.DateOnly) != now.Format(time.DateOnly) {
		layout = time.DateTime
	}
	return t.Format(layout) + " (" + Relative(t, now) + ")"
}

// Relative is "in 25s", "3m10s ago" or "now", to the second.
func Relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d == 0:
		return "now"
	case d > 0:
		return "in " + d.String()
	default:
		return (-d).String() + " ago"
	}
}

// JSON writes v indented, with a final newline.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// State is a lifecycle state without its prefix: "SOAKING", "WAITING".
func State(s nodeconfigv1.LifecycleState) string {
	return strings.TrimPrefix(s.String(), "LIFECYCLE_STATE_")
}

var stateMeanings = map[nodeconfigv1.LifecycleState]string{
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED:   "not yet reconciled",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT: "nothing is assigned",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING:       "selected, but the rollout's pacing holds it back",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING:       "its assigned config is active and on trial",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE:        "its assigned config is active and last-known-good",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK:   "its assigned config failed late and last-known-good is active",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING:       "an early error, retried with backoff",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT:      "two or more NodeConfigs select it",
	nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED:        "its NodeConfig's rollout is halted by maxFailures",
}

// StateMeaning explains a lifecycle state.
func StateMeaning(s nodeconfigv1.LifecycleState) string { return stateMeanings[s] }

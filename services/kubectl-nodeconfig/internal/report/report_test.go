package report

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func TestRelative(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(25 * time.Second), "in 25s"},
		{now.Add(-190 * time.Second), "3m10s ago"},
		{now.Add(200 * time.Millisecond), "now"},
	} {
		if got := Relative(c.at, now); got != c.want {
			t.Errorf("Relative(%v) = %q, want %q", c.at.Sub(now), got, c.want)
		}
	}
}

func TestWhenShowsTheDateOnlyForAnotherDay(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)
	if got, want := When(now.Add(25*time.Second), now), "12:00:25 (in 25s)"; got != want {
		t.Errorf("When today = %q, want %q", got, want)
	}
	if got, want := When(now.Add(72*time.Hour), now), "2026-03-04 12:00:00 (in 72h0m0s)"; got != want {
		t.Errorf("When in three days = %q, want %q", got, want)
	}
}

func TestVersionText(t *testing.T) {
	v := FromSource(&corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{
		Namespace: "kube-system", Name: "kubelet-config", UID: "u1", ResourceVersion: "512", KubeletConfigKey: "config.yaml"}})
	if got := v.Text("kube-system", "kubelet-config"); got != "512" {
		t.Errorf("same ConfigMap: %q, want 512", got)
	}
	if got := v.Text("kube-system", "other"); got != "kube-system/kubelet-config@512" {
		t.Errorf("another ConfigMap: %q", got)
	}
	var local *Version
	if got := local.Text("a", "b"); got != "local" {
		t.Errorf("local default: %q", got)
	}
	if FromSource(nil) != nil || FromSource(&corev1.NodeConfigSource{}) != nil {
		t.Error("no ConfigMap must be the local default (nil)")
	}
	if got, want := v.Sentence(), "ConfigMap kube-system/kubelet-config key config.yaml at resourceVersion 512"; got != want {
		t.Errorf("Sentence = %q, want %q", got, want)
	}
}

func TestState(t *testing.T) {
	if got := State(nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK); got != "ROLLED_BACK" {
		t.Errorf("State = %q", got)
	}
	for v := range nodeconfigv1.LifecycleState_name {
		if StateMeaning(nodeconfigv1.LifecycleState(v)) == "" {
			t.Errorf("no meaning for %v", nodeconfigv1.LifecycleState(v))
		}
	}
}

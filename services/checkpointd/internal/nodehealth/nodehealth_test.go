package nodehealth

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

var restart = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func node(conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: conds}}
}

func cond(typ corev1.NodeConditionType, status corev1.ConditionStatus, since time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(since), Reason: "Kubelet" + string(typ), Message: "said by the kubelet"}
}

func pod(name, uid string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// started is a gate over objects, its caches synced, at a clock the test
// moves.
func started(t *testing.T, objs ...any) (*Gate, *atomic.Int64) {
	t.Helper()
	kube := fake.NewClientset()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Node:
			_, err = kube.CoreV1().Nodes().Create(context.Background(), o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = kube.CoreV1().Pods(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	now := &atomic.Int64{}
	now.Store(restart.Add(10 * time.Second).UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g, err := Start(ctx, Options{Kube: kube, Node: "n1", PodsReadyTimeout: time.Minute, Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if !cache.WaitForCacheSync(wait.Done(), g.synced...) {
		t.Fatal("caches never synced")
	}
	return g, now
}

func healthyNode() *corev1.Node {
	before := restart.Add(-time.Hour)
	return node(cond(corev1.NodeReady, corev1.ConditionTrue, before), cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, before),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, before), cond(corev1.NodePIDPressure, corev1.ConditionFalse, before))
}

func TestAPressureTheTrialCausedFailsIt(t *testing.T) {
	n := healthyNode()
	n.Status.Conditions[1] = cond(corev1.NodeMemoryPressure, corev1.ConditionTrue, restart.Add(5*time.Second))
	g, _ := started(t, n)
	v := g.Judge(nil, restart, nil)
	if !v.Failed || !strings.Contains(v.Message, "MemoryPressure is True since 2026-11-27T12:00:05Z (KubeletMemoryPressure: said by the kubelet)") {
		t.Fatalf("verdict %+v; want failed, naming the condition and the kubelet's words", v)
	}
}

func TestAPressureFromBeforeTheTrialHoldsIt(t *testing.T) {
	n := healthyNode()
	n.Status.Conditions[2] = cond(corev1.NodeDiskPressure, corev1.ConditionTrue, restart.Add(-time.Minute))
	g, _ := started(t, n)
	if v := g.Judge(nil, restart, nil); v.Failed || !v.Hold || !strings.Contains(v.Message, "DiskPressure is True") {
		t.Fatalf("verdict %+v; want a hold that blames nothing", v)
	}
}

func TestANodeNotReadySinceTheRestartFailsIt(t *testing.T) {
	n := healthyNode()
	n.Status.Conditions[0] = cond(corev1.NodeReady, corev1.ConditionFalse, restart.Add(time.Second))
	g, now := started(t, n)
	if v := g.Judge(nil, restart, nil); v.Failed || !v.Hold || !strings.Contains(v.Message, "waiting up to 1m0s for the restarted kubelet to report Ready") {
		t.Fatalf("verdict %+v within the grace; want a hold", v)
	}
	now.Store(restart.Add(2 * readyGrace).UnixNano())
	if v := g.Judge(nil, restart, nil); !v.Failed || !strings.Contains(v.Message, "Ready is False") {
		t.Fatalf("verdict %+v past the grace; want failed on Ready", v)
	}
}

// A pod seen Ready again after the restart that turns unready later (its
// own database down) is not the config's doing; nor is a pod the node's
// graceful shutdown ended (a reboot mid-soak).
func TestWhatAPodDoesOfItselfIsNotBlamed(t *testing.T) {
	flaky := pod("flaky", "u-flaky", corev1.PodRunning, true)
	rebooted := pod("rebooted", "u-rebooted", corev1.PodFailed, false)
	rebooted.Status.Reason, rebooted.Status.Message = "Terminated", "Pod was terminated in response to imminent node shutdown."
	rebooted.Status.Conditions = append(rebooted.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"})
	g, now := started(t, healthyNode(), flaky, rebooted)
	before := []string{"default/flaky/u-flaky", "default/rebooted/u-rebooted"}
	if v := g.Judge(before, restart, nil); v.Failed || v.Hold {
		t.Fatalf("verdict %+v; want a pass", v)
	}
	flaky.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := g.o.Kube.CoreV1().Pods("default").UpdateStatus(context.Background(), flaky, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informer's cache catches up.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		p, err := g.pods.Pods("default").Get("flaky")
		return err == nil && !podReady(p), nil
	}); err != nil {
		t.Fatal(err)
	}
	now.Store(restart.Add(time.Hour).UnixNano())
	if v := g.Judge(before, restart, nil); v.Failed {
		t.Fatalf("verdict %+v; a pod unready of itself after it came back is not the config's", v)
	}
}

func TestARoutineRelistIsNoOutage(t *testing.T) {
	g, _ := started(t, healthyNode())
	g.noteWatchError(nil, apierrors.NewResourceExpired("too old resource version"))
	if v := g.Judge(nil, restart, nil); v.Hold {
		t.Fatalf("verdict %+v after a 410 relist; want no hold", v)
	}
}

func TestThePodsReadyBeforeTheTrialMustBeReadyAgain(t *testing.T) {
	done := pod("done", "u-done", corev1.PodSucceeded, false)
	done.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	g, now := started(t, healthyNode(),
		pod("web", "u-web", corev1.PodRunning, true),
		pod("replaced", "u-new", corev1.PodRunning, false),
		pod("slow", "u-slow", corev1.PodRunning, false),
		pod("later", "u-later", corev1.PodPending, false),
		done,
	)
	before := []string{"default/web/u-web", "default/gone/u-gone", "default/replaced/u-old", "default/slow/u-slow", "default/done/u-done"}
	v := g.Judge(before, restart, nil)
	if v.Failed || !v.Hold || !strings.Contains(v.Message, "1 of the 5 pods") || !strings.Contains(v.Message, "default/slow") {
		t.Fatalf("verdict %+v; want a hold on default/slow alone (gone, replaced and done pods are not the config's)", v)
	}
	now.Store(restart.Add(time.Minute).UnixNano())
	v = g.Judge(before, restart, nil)
	if !v.Failed || !strings.Contains(v.Message, "not Ready 1m0s after the kubelet's restart: default/slow (Running)") || strings.Contains(v.Message, "replaced") {
		t.Fatalf("verdict %+v; want failed on default/slow past the bound", v)
	}
	ready, err := g.ReadyPods()
	if err != nil || !slices.Equal(ready, []string{"default/web/u-web"}) {
		t.Fatalf("ready pods %v (%v); want the Running and Ready one", ready, err)
	}
}

func TestAPodThatEndsOnTheTrialFailsItAtOnce(t *testing.T) {
	rejected := pod("web", "u-web", corev1.PodFailed, false)
	rejected.Status.Reason, rejected.Status.Message = "OutOfpods", "Node didn't have enough resource: pods"
	preempted := pod("api", "u-api", corev1.PodSucceeded, false)
	preempted.Status.Conditions = append(preempted.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "TerminationByKubelet", Message: "Pod was terminated in response to imminent node shutdown."})
	stopped := pod("cache", "u-cache", corev1.PodSucceeded, false)
	job := pod("job", "u-job", corev1.PodSucceeded, false)
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	g, _ := started(t, healthyNode(), rejected, preempted, stopped, job)
	v := g.Judge([]string{"default/web/u-web", "default/api/u-api", "default/cache/u-cache", "default/job/u-job"}, restart, nil)
	for _, want := range []string{
		"3 of the 4 pods Ready before the trial ended on it",
		"default/web (Failed: OutOfpods: Node didn't have enough resource: pods)",
		"default/api (Succeeded: TerminationByKubelet: Pod was terminated",
		"default/cache (Succeeded: a pod that restarts always ended)",
	} {
		if !v.Failed || !strings.Contains(v.Message, want) {
			t.Fatalf("verdict %+v; want failed within the bound, saying %q", v, want)
		}
	}
	if strings.Contains(v.Message, "default/job") {
		t.Fatalf("verdict %+v; a Job's pod that finished is not the config's doing", v)
	}
}

func TestNothingIsJudgedWhileTheAPIServerCannotBeRead(t *testing.T) {
	n := healthyNode()
	n.Status.Conditions[1] = cond(corev1.NodeMemoryPressure, corev1.ConditionTrue, restart.Add(5*time.Second))
	g, now := started(t, n)
	g.noteWatchError(nil, errors.New("connection refused"))
	if v := g.Judge(nil, restart, nil); v.Failed || !v.Hold || !strings.Contains(v.Message, "connection refused") {
		t.Fatalf("verdict %+v; want a hold naming the error", v)
	}
	if _, err := g.ReadyPods(); err == nil {
		t.Fatal("ready pods read from caches that may be stale")
	}
	now.Add(int64(2 * staleAfterError))
	if v := g.Judge(nil, restart, nil); !v.Failed {
		t.Fatalf("verdict %+v once the watch is back; want the pressure judged again", v)
	}
}

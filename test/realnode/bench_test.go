package realnode_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// BenchmarkKubeletRunsNewConfig: a ConfigMap edit -> the real kubelet,
// restarted by the agent, running it (its own /configz), over b.N edits
// (make bench: 20).
func BenchmarkKubeletRunsNewConfig(b *testing.B) {
	ctx := context.Background()
	benchInstall(ctx, b, `{"spec":{"validator":"kubelet","soakSeconds":1,"rollout":{"maxFailures":0}}}`)
	var ms []float64
	for i := 0; i < b.N; i++ {
		pods := nextMaxPods()
		start := time.Now()
		setKubeletConfig(ctx, b, fmt.Sprintf("maxPods: %d\n", pods))
		waitConfigz(ctx, b, pods)
		ms = append(ms, float64(time.Since(start).Milliseconds()))
	}
	reportPercentiles(b, ms, "to-kubelet-running")
}

// BenchmarkBadConfigToHealthyLastKnownGood: a drop-in the validator lets
// through and the kubelet refuses (it exits 1 on it) -> the kubelet healthy
// on last-known-good again, rolled back by the agent, over b.N bad edits
// (make bench: 10), each after a good one became last-known-good.
func BenchmarkBadConfigToHealthyLastKnownGood(b *testing.B) {
	ctx := context.Background()
	benchInstall(ctx, b, `{"spec":{"validator":"none","soakSeconds":1,"rollout":{"maxFailures":0}}}`)
	var ms []float64
	for i := 0; i < b.N; i++ {
		pods := nextMaxPods()
		rv := setKubeletConfig(ctx, b, fmt.Sprintf("maxPods: %d\n", pods))
		waitLastKnownGood(ctx, b, rv)
		start := time.Now()
		setKubeletConfig(ctx, b, fmt.Sprintf("maxPods: \"bad-%d\"\n", i))
		waitBenchStatus(ctx, b, func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return c.Reason == "ConsumerUnhealthy" && nodeview.ResourceVersion(st.Active) == rv
		})
		waitConfigz(ctx, b, pods)
		ms = append(ms, float64(time.Since(start).Milliseconds()))
	}
	reportPercentiles(b, ms, "to-healthy-lkg")
}

// maxPods values differ from one edit to the next, across the runs a
// benchmark makes with growing b.N, so that no edit is already in place.
var maxPodsSeq int64

func nextMaxPods() int64 {
	maxPodsSeq++
	return 60 + maxPodsSeq%50
}

// benchInstall installs nodeconfig as the README says unless it already
// runs, and patches the NodeConfig with patch.
func benchInstall(ctx context.Context, b *testing.B, patch string) {
	b.Helper()
	client := node.Cluster.Client
	if _, err := client.AppsV1().DaemonSets(namespace).Get(ctx, "nodeconfig-agent", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if err := node.Install(ctx, b.TempDir(), func(string) {}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := node.Shell(ctx, b.TempDir(), "kubectl patch nodeconfig workers --type merge -p '"+patch+"'"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
}

// setKubeletConfig replaces the drop-in in the ConfigMap and returns its new version.
func setKubeletConfig(ctx context.Context, b *testing.B, body string) string {
	b.Helper()
	data := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + body
	patch := fmt.Sprintf(`{"data":{"config.yaml":%q}}`, data)
	cm, err := node.Cluster.Client.CoreV1().ConfigMaps("kube-system").Patch(ctx, "kubelet-config", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return cm.ResourceVersion
}

func waitConfigz(ctx context.Context, b *testing.B, want int64) {
	b.Helper()
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		if !realnode.KubeletHealthy() {
			return false, fmt.Errorf("kubelet not healthy")
		}
		cfg, err := node.Configz(ctx)
		if err != nil {
			return false, err
		}
		got, _ := cfg["maxPods"].(float64)
		return int64(got) == want, fmt.Errorf("configz maxPods %v, want %d", cfg["maxPods"], want)
	})
	if err != nil {
		b.Fatal(err)
	}
}

func waitLastKnownGood(ctx context.Context, b *testing.B, rv string) {
	b.Helper()
	waitBenchStatus(ctx, b, func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == rv
	})
}

func waitBenchStatus(ctx context.Context, b *testing.B, check func(corev1.NodeConfigStatus, *corev1.NodeCondition) bool) {
	b.Helper()
	var last string
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		st, c, err := nodeview.Read(ctx, node.Cluster.Client, realnode.NodeName)
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("%s/%s %q", c.Status, c.Reason, c.Message)
		return check(st, c), nil
	})
	if err != nil {
		b.Fatalf("%v (last: %s)", err, last)
	}
}

// reportPercentiles reports p50 and p99 of the samples, in ms.
func reportPercentiles(b *testing.B, ms []float64, name string) {
	b.StopTimer()
	sort.Float64s(ms)
	at := func(q float64) float64 { return ms[int(q*float64(len(ms)-1)+0.5)] }
	b.ReportMetric(at(0.5), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
	b.Logf("%s over %d: %s ms", name, len(ms), strings.Trim(fmt.Sprint(ms), "[]"))
}

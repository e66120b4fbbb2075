package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	nodeconfigfake "nodeconfig.io/services/api/client/clientset/fake"
	"nodeconfig.io/services/api/v1alpha1"
)

// options are a reconciler's over fake clients; nodes are the Nodes the
// API server has.
func options(t *testing.T, kube *kubefake.Clientset, nodes ...string) Options {
	// New only looks for an executable file there; no test here runs it.
	kubeletCheck := filepath.Join(t.TempDir(), "nodeconfig-kubelet-check")
	if err := os.WriteFile(kubeletCheck, []byte("#!/bin/sh\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	metaScheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(metaScheme); err != nil {
		t.Fatal(err)
	}
	var nodeMetas []runtime.Object
	for _, n := range nodes {
		if _, err := kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nodeMetas = append(nodeMetas, &metav1.PartialObjectMetadata{TypeMeta: nodeTypeMeta, ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return Options{
		KubeletCheck:     kubeletCheck,
		Kube:             kube,
		NodeConfigClient: nodeconfigfake.NewSimpleClientset(),
		Metadata:         metadatafake.NewSimpleMetadataClient(metaScheme, nodeMetas...),
		Log:              slog.New(slog.DiscardHandler),
		Agents:           Agents{SocketTemplate: filepath.Join(t.TempDir(), "{node}.sock")},
		NodeEvents:       "warnings",
		Workers:          1,
	}
}

func TestNewRefusesOptionsThatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"node events", func(o *Options) { o.NodeEvents = "some" }, `--node-events "some"`},
		{"token account", func(o *Options) { o.Agents.TokenAudience = "agent/{node}" }, "want NAMESPACE/NAME"},
		{"tokens in clear text", func(o *Options) {
			o.Agents.TokenAudience, o.Agents.TokenServiceAccount = "agent/{node}", "ns/r"
		}, "need --agent-ca-file"},
		{"agent signer without the agents' account", func(o *Options) {
			o.Agents.SignerKeyFile, o.Agents.ServiceAccount = "/dev/null", "nodeconfig-agent"
		}, "--agent-service-account \"nodeconfig-agent\": want NAMESPACE/NAME"},
		{"agent signer without a CA", func(o *Options) {
			o.Agents.SignerKeyFile, o.Agents.ServiceAccount = filepath.Join(t.TempDir(), "ca.key"), "ns/agent"
		}, "agent signer CA"},
		// What to do is in the message: install it, name it, or turn the
		// central check off.
		{"kubelet validator missing", func(o *Options) { o.KubeletCheck += ".missing" },
			"nodeconfig-kubelet-check.missing does not exist: install nodeconfig-kubelet-check next to the reconciler (make build and the image do), name it with --kubelet-check-binary, or leave validation to the nodes with --node-validation-only"},
		{"kubelet validator not executable", func(o *Options) {
			if err := os.Chmod(o.KubeletCheck, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is not an executable file"},
	} {
		o := options(t, kubefake.NewClientset())
		tc.change(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// Without central validation the kubelet validator's binary is not
// needed.
func TestNewWithNodeValidationOnlyNeedsNoKubeletCheck(t *testing.T) {
	o := options(t, kubefake.NewClientset())
	o.KubeletCheck, o.NodeValidationOnly = filepath.Join(t.TempDir(), "missing"), true
	if _, err := New(o); err != nil {
		t.Fatalf("New with --node-validation-only and no kubelet validator: %v", err)
	}
}

// Without leader election, Run leads at once: the ReconcilerService answers
// from the running controller, and not once Run has returned.
func TestRunServesTheControllerUntilTheContextEnds(t *testing.T) {
	r, err := New(options(t, kubefake.NewClientset(), "n1"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r.Register(grpc.NewServer(), reg)
	if r.nodes() != nil {
		t.Fatal("nodes served before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	// The node has no agent (no socket): its sync fails and is recorded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n := r.nodes(); n != nil {
			if info, ok := n.NodeInfo("n1"); ok && info.Err != "" {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("node n1 was not synced within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The gauges are reported periodically: the first report may trail
	// the sync.
	n, err := 0, error(nil)
	_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n, err = testutil.GatherAndCount(reg, "nodeconfig_reconciler_queue_depth")
		return err == nil && n == 1, nil
	})
	if err != nil || n != 1 {
		t.Errorf("the controller's metrics are not on the registry Register was given (%d series, %v)", n, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	if r.nodes() != nil {
		t.Error("nodes still served after Run returned")
	}
}

// A replica that stops leading (its Lease lost, here its context ended)
// says so and exports none of the leadership's gauges: next to the new
// leader's, its last values would be stale, and alerts that take the
// maximum across replicas would fire on them.
func TestLeadershipEndClearsItsGauges(t *testing.T) {
	o := options(t, kubefake.NewClientset(), "n1")
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "nc", Finalizers: []string{v1alpha1.Finalizer}},
		Spec: v1alpha1.NodeConfigSpec{NodeSelector: &v1alpha1.LabelSelector{}}}
	o.NodeConfigClient = nodeconfigfake.NewSimpleClientset(nc)
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r.Register(grpc.NewServer(), reg)
	leading := func() string {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "nodeconfig_reconciler_leader" && len(f.GetMetric()) == 1 {
				return fmt.Sprint(f.GetMetric()[0].GetGauge().GetValue())
			}
		}
		return "absent"
	}
	if v := leading(); v != "0" {
		t.Errorf("nodeconfig_reconciler_leader = %s before Run, want 0", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	leaderships := []string{"nodeconfig_rollout_nodes", "nodeconfig_rollout_halted", "nodeconfig_reconciler_nodes", "nodeconfig_reconciler_queue_depth"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := testutil.GatherAndCount(reg, "nodeconfig_rollout_nodes")
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("no rollout gauges within 10s of leading")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := leading(); v != "1" {
		t.Errorf("nodeconfig_reconciler_leader = %s while leading, want 1", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, leaderships...); err != nil || n != 0 {
		t.Errorf("%d series of %v left after the leadership ended (%v), want none", n, leaderships, err)
	}
	if v := leading(); v != "0" {
		t.Errorf("nodeconfig_reconciler_leader = %s after the leadership ended, want 0", v)
	}
}

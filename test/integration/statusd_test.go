package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/audit"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
	"nodeconfig.io/test/framework/testenv"
)

func startNode(t *testing.T, name string, statusdArgs ...string) *sim.Node {
	t.Helper()
	root := testenv.ScratchDir(t, "nc-")
	n := testenv.StartNode(t, cluster.Shared, root, name, sim.NodeOptions{StatusdArgs: statusdArgs})
	t.Cleanup(func() { testenv.StopNode(t, cluster.Shared, n) })
	return n
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := cluster.Shared.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitReason(t *testing.T, node, reason string) {
	t.Helper()
	testenv.WaitReason(t, cluster.Shared.Client, node, reason, 20*time.Second)
}

func annotation(t *testing.T, node string) string {
	return getNode(t, node).Annotations[v1alpha1.NodeAnnotationConfigStatus]
}

func assignDirectly(t *testing.T, n *sim.Node, rv, content string) {
	t.Helper()
	ctx := context.Background()
	src := &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "uid-" + n.Name, ResourceVersion: rv, Key: "config.yaml"}
	ck := n.Checkpoint()
	if _, err := ck.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"config.yaml": content}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ck.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src, SoakSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	if _, err := ck.Activate(ctx, &nodeconfigv1.ActivateRequest{}); err != nil {
		t.Fatal(err)
	}
}

// The annotation and the condition follow checkpointd's records.
func TestStatusdProjectsRecordsOntoNode(t *testing.T) {
	n := startNode(t, "statusd-projects")
	waitReason(t, n.Name, "LocalDefault")
	if err := proc.WaitFor(10*time.Second, func() (bool, error) {
		return annotation(t, n.Name) == "{}", nil
	}); err != nil {
		t.Fatalf("annotation with nothing assigned is not {}: %v", err)
	}
	assignDirectly(t, n, "7", "a: 1\n")
	waitReason(t, n.Name, "Soaking")
	var st corev1.NodeConfigStatus
	err := proc.WaitFor(10*time.Second, func() (bool, error) {
		var err error
		st, err = v1alpha1.DecodeNodeConfigStatus(annotation(t, n.Name))
		return err == nil && st.Active != nil && st.Active.ConfigMap.ResourceVersion == "7" && st.Assigned.ConfigMap.KubeletConfigKey == "config.yaml", err
	})
	if err != nil {
		t.Fatalf("annotation = %+v: %v", st, err)
	}
}

// No change, no write: 100 syncs with nothing new send no patch.
func TestStatusdSendsNoPatchWhenNothingChanged(t *testing.T) {
	metrics, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "statusd-quiet", "--sync-period", "20ms", "--metrics-addr", metrics)
	waitReason(t, n.Name, "LocalDefault")
	skippedBefore := metric(t, metrics, "nodeconfig_statusd_patches_skipped_total")
	patchesBefore := countPatches(t, n.Name)
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		return metric(t, metrics, "nodeconfig_statusd_patches_skipped_total") >= skippedBefore+100, nil
	}); err != nil {
		t.Fatalf("statusd did not run 100 syncs: %v", err)
	}
	if after := countPatches(t, n.Name); after != patchesBefore {
		t.Fatalf("%d patches during 100 syncs without change, want 0", after-patchesBefore)
	}
	if sent := metric(t, metrics, "nodeconfig_statusd_patches_sent_total"); sent != float64(patchesBefore) {
		t.Fatalf("statusd counts %v patches sent, the audit log %d", sent, patchesBefore)
	}
}

// statusd owns its condition and annotation only; another component's
// conditions survive every patch. Reported conditions appear too.
func TestStatusdLeavesOtherConditionsAndAppliesReports(t *testing.T) {
	n := startNode(t, "statusd-neighbours")
	waitReason(t, n.Name, "LocalDefault")
	patch := []byte(`{"status":{"conditions":[{"type":"KernelDeadlock","status":"False","reason":"KernelHasNoDeadlock","message":"npd"}]}}`)
	if _, err := cluster.Shared.Client.CoreV1().Nodes().Patch(context.Background(), n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	assignDirectly(t, n, "1", "a: 1\n")
	waitReason(t, n.Name, "Soaking")
	conn, err := sim.Dial("unix://" + n.StatusdSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	status := nodeconfigv1.NewStatusServiceClient(conn)
	_, err = status.Report(context.Background(), &nodeconfigv1.ReportRequest{Name: "gpu-checker", Conditions: []*nodeconfigv1.Condition{
		{Type: "GPUHealthy", Status: nodeconfigv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "AllGPUsOk", Message: "4 of 4"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var node *corev1.Node
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		node = getNode(t, n.Name)
		c := condition(node, "GPUHealthy")
		return c != nil && c.Reason == "AllGPUsOk", fmt.Errorf("condition GPUHealthy = %+v", c)
	}); err != nil {
		t.Fatalf("the reported condition never reached the Node: %v", err)
	}
	if c := condition(node, "KernelDeadlock"); c == nil || c.Reason != "KernelHasNoDeadlock" {
		t.Fatalf("another component's condition was lost: %+v", node.Status.Conditions)
	}
	_, err = status.Report(context.Background(), &nodeconfigv1.ReportRequest{Name: "gpu-checker", Conditions: []*nodeconfigv1.Condition{
		{Type: "Ready", Status: nodeconfigv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Mine", Message: "x"},
	}})
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("reporting the kubelet's Ready condition: %v, want InvalidArgument", err)
	}
	setters, err := status.ListSetters(context.Background(), &nodeconfigv1.ListSettersRequest{})
	if err != nil || len(setters.GetSetters()) != 3 || setters.GetSetters()[2].GetName() != "gpu-checker" {
		t.Fatalf("setters = %v (%v)", setters, err)
	}
}

// An API server outage loses nothing: the latest state is sent when it
// comes back, and nothing stale overwrites it.
func TestStatusdCatchesUpAfterAPIServerRestart(t *testing.T) {
	n := startNode(t, "statusd-outage")
	waitReason(t, n.Name, "LocalDefault")
	c := cluster.Shared
	c.APIServer.Kill()
	assignDirectly(t, n, "1", "a: 1\n")
	assignDirectly(t, n, "2", "a: [\n") // rolls back: the newest state is a late error
	if err := c.APIServer.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReason(t, n.Name, "RolledBack")
	var st corev1.NodeConfigStatus
	err := proc.WaitFor(10*time.Second, func() (bool, error) {
		var err error
		st, err = v1alpha1.DecodeNodeConfigStatus(annotation(t, n.Name))
		return err == nil && st.Assigned != nil && st.Assigned.ConfigMap.ResourceVersion == "2" && st.Error != "", err
	})
	if err != nil {
		t.Fatalf("annotation after the outage = %+v, want the newest state: %v", st, err)
	}
}

func condition(n *corev1.Node, typ string) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func countPatches(t *testing.T, node string) int {
	t.Helper()
	n, err := audit.Count(filepath.Join(cluster.Shared.Dir, "audit.log"), audit.Writes("nodes", node, "nodeconfig-statusd"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

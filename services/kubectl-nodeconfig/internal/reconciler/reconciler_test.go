package reconciler

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func lease(holder string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: DefaultLease}}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	return l
}

func pod(name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: name}, Status: corev1.PodStatus{Phase: phase}}
}

func TestLeader(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		objects []runtime.Object
		want    string
		wantErr string
	}{
		{"the holder names the pod (the shipped manifests)", []runtime.Object{lease("nodeconfig-reconciler-7d9f-abcde"), pod("nodeconfig-reconciler-7d9f-abcde", corev1.PodRunning)}, "nodeconfig-reconciler-7d9f-abcde", ""},
		{"a default identity, hostname_pid", []runtime.Object{lease("nodeconfig-reconciler-7d9f-abcde_1"), pod("nodeconfig-reconciler-7d9f-abcde", corev1.PodRunning)}, "nodeconfig-reconciler-7d9f-abcde", ""},
		{"no Lease", nil, "", "Lease nodeconfig-system/nodeconfig-reconciler"},
		{"no holder", []runtime.Object{lease("")}, "", "has no holder"},
		{"a holder outside the cluster", []runtime.Object{lease("laptop_42")}, "", `held by "laptop_42", which names no pod`},
		{"a pending pod", []runtime.Object{lease("r"), pod("r", corev1.PodPending)}, "", "pod nodeconfig-system/r, is Pending"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Leader(ctx, fake.NewClientset(c.objects...), DefaultNamespace, DefaultLease)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got.Name != c.want {
				t.Fatalf("Leader = %v, %v; want pod %q", got, err, c.want)
			}
		})
	}
}

type fakeReconciler struct {
	nodeconfigv1.UnimplementedReconcilerServiceServer
}

func (fakeReconciler) ListNodes(context.Context, *nodeconfigv1.ListNodesRequest) (*nodeconfigv1.ListNodesResponse, error) {
	return &nodeconfigv1.ListNodesResponse{Nodes: []*nodeconfigv1.NodeState{{NodeName: "node-0"}}}, nil
}

func serve(t *testing.T, network, address string) string {
	t.Helper()
	lis, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	nodeconfigv1.RegisterReconcilerServiceServer(s, fakeReconciler{})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestConnectAtAnAddress(t *testing.T) {
	tcp := serve(t, "tcp", "127.0.0.1:0")
	sock := filepath.Join(t.TempDir(), "r.sock")
	serve(t, "unix", sock)
	for _, addr := range []string{tcp, "unix:" + sock} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := Connect(ctx, Options{Address: addr}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := conn.ListNodes(ctx, &nodeconfigv1.ListNodesRequest{})
		if err != nil || len(resp.GetNodes()) != 1 {
			t.Fatalf("%s: ListNodes = %v, %v", addr, resp, err)
		}
		if _, err := conn.PreviewNode(ctx, &nodeconfigv1.PreviewNodeRequest{NodeName: "node-0"}); err == nil {
			t.Fatalf("%s: an unimplemented PreviewNode answered", addr)
		}
		if conn.Via != addr {
			t.Errorf("Via = %q, want %q", conn.Via, addr)
		}
		conn.Close()
		cancel()
	}
}

func TestConnectWithoutALeaderSaysWhy(t *testing.T) {
	_, err := Connect(context.Background(), Options{Namespace: DefaultNamespace, Lease: DefaultLease, Port: DefaultPort}, nil, fake.NewClientset())
	if err == nil || !strings.Contains(err.Error(), "find the reconciler's leader") {
		t.Fatalf("err = %v", err)
	}
}

package servekit

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
)

// Every server's page says what was built, counts its gRPC calls by
// method and code, and carries client-go's requests and work queues.
func TestServerExportsBuildGRPCAndClientGoSeries(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "s.sock")
	s, err := newServer(commonFlags{Socket: socket, Auth: "none", MetricsAuth: "none"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, "test.Service") }()
	t.Cleanup(func() { cancel(); <-served })

	want := `
# HELP nodeconfig_build_info 1, labelled with the version of the binary and the Go version it was built with.
# TYPE nodeconfig_build_info gauge
nodeconfig_build_info{go_version="` + runtime.Version() + `",version="` + version() + `"} 1
`
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(want), "nodeconfig_build_info"); err != nil {
		t.Error(err)
	}

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, s.Registry, "grpc_server_handled_total", map[string]string{"grpc_method": "Check", "grpc_code": "OK"}); n != 1 {
		t.Errorf("grpc_server_handled_total for one health check: %v, want 1", n)
	}

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","items":[]}`))
	}))
	defer api.Close()
	kube := kubernetes.NewForConfigOrDie(&rest.Config{Host: api.URL})
	if _, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, s.Registry, "rest_client_requests_total", map[string]string{"code": "200", "method": "GET"}); n < 1 {
		t.Errorf("rest_client_requests_total after a list: %v, want at least 1", n)
	}

	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "servekit-test"})
	q.Add("a")
	q.ShutDown()
	if n := counterValue(t, s.Registry, "workqueue_adds_total", map[string]string{"name": "servekit-test"}); n != 1 {
		t.Errorf("workqueue_adds_total after one add: %v, want 1", n)
	}
	ForgetWorkQueues("servekit-test")
	if n := testutil.CollectAndCount(queueDepth, "workqueue_depth"); n != 0 {
		t.Errorf("%d workqueue_depth series after ForgetWorkQueues, want none", n)
	}
}

// counterValue sums the series of name whose labels include labels.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

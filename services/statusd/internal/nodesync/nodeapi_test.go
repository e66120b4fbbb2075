package nodesync

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// A refusal as too many requests reaches the syncer, or its informer's
// reflector, after one request (not client-go's eleven, a second apart),
// and the syncer's wait is at least the server's Retry-After and differs
// from one agent to the next.
func TestRefusalIsRetriedBySyncerWithJitter(t *testing.T) {
	var requests, unselected atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("fieldSelector") != "metadata.name=n" {
			unselected.Add(1)
		}
		// What the API server's in-flight limit answers.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	nodes := newNodeAPI(client)
	// The informer's list and watch, as its reflector makes them.
	informer := cache.ToListerWatcherWithContext(ownNodeListWatch(nodes, "n", client))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"get":   func() error { _, err := nodes.Get(ctx, "n"); return err },
		"patch": func() error { _, err := nodes.PatchStatus(ctx, "n", []byte(`{}`)); return err },
		"list":  func() error { _, err := informer.ListWithContext(ctx, metav1.ListOptions{}); return err },
		"watch": func() error {
			_, err := informer.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "5"})
			return err
		},
	} {
		requests.Store(0)
		err := call()
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("%s: got %v, want a refusal as too many requests", name, err)
		}
		if n := requests.Load(); n != 1 {
			t.Fatalf("%s: the API server saw %d requests, want 1", name, n)
		}
		if n := unselected.Load(); n != 0 {
			t.Fatalf("%s: %d requests for Nodes other than statusd's own", name, n)
		}
		seen := map[time.Duration]bool{}
		for range 100 {
			b := newBackoff()
			d := retryDelay(b, err)
			if d < time.Second || d >= 2200*time.Millisecond {
				t.Fatalf("%s: first retry in %v, want within [1s, 2.2s): at least the Retry-After, at most twice (and the backoff's 10%% jitter)", name, d)
			}
			seen[d.Truncate(100*time.Millisecond)] = true
			// Refused again, it waits about twice as long.
			if d := retryDelay(b, err); d < 2*time.Second || d >= 4400*time.Millisecond {
				t.Fatalf("%s: second retry in %v, want within [2s, 4.4s)", name, d)
			}
		}
		if len(seen) < 5 {
			t.Errorf("%s: 100 agents' first retries fell in %d tenths of a second, want them spread", name, len(seen))
		}
	}
}

// Other failures keep the plain backoff: a patch the server rejects is not
// held back by a second.
func TestOtherFailuresKeepTheBackoff(t *testing.T) {
	err := apierrors.NewInternalError(context.DeadlineExceeded)
	if d := retryDelay(newBackoff(), err); d >= 200*time.Millisecond {
		t.Fatalf("first retry after a server error in %v, want the backoff's 100 ms (jittered 10%%)", d)
	}
}

// The patch goes to the status subresource as statusd's field manager and
// asks for protobuf first, the same request client-go's typed client sends.
func TestPatchStatusRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/api/v1/nodes/n/status" ||
			r.URL.Query().Get("fieldManager") != fieldManager || r.Header.Get("Content-Type") != "application/strategic-merge-patch+json" ||
			!strings.HasPrefix(r.Header.Get("Accept"), "application/vnd.kubernetes.protobuf") {
			http.Error(w, r.Method+" "+r.URL.String()+" "+r.Header.Get("Content-Type")+" accepting "+r.Header.Get("Accept"), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n","resourceVersion":"7"}}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	node, err := newNodeAPI(client).PatchStatus(context.Background(), "n", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if node.Name != "n" || node.ResourceVersion != "7" {
		t.Fatalf("got %s at %s, want the Node the server answered", node.Name, node.ResourceVersion)
	}
}

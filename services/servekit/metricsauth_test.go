package servekit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeReviews answers TokenReviews from tokens (token -> user; absent:
// not authenticated) and SubjectAccessReviews from allowed (user -> may
// get /metrics), counting the calls; fail makes both return an error.
type fakeReviews struct {
	tokens        map[string]string
	allowed       map[string]bool
	fail          bool
	tokenReviews  int
	accessReviews int
}

func (f *fakeReviews) guard(t *testing.T) *metricsGuard {
	t.Helper()
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.tokenReviews++
		if f.fail {
			return true, nil, errors.New("API server unreachable")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if user, ok := f.tokens[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user, Groups: []string{"g"}}}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.accessReviews++
		if f.fail {
			return true, nil, errors.New("API server unreachable")
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		if na == nil || na.Verb != "get" || sar.Spec.Groups[0] != "g" {
			t.Errorf("SubjectAccessReview asks %+v", sar.Spec)
		}
		sar.Status.Allowed = f.allowed[sar.Spec.User] && na.Path == "/metrics"
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC rule"
		}
		return true, sar, nil
	})
	g, err := newMetricsGuard(MetricsClients{Authentication: c.AuthenticationV1(), Authorization: c.AuthorizationV1()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func get(h http.Handler, path, authorization string) int {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestMetricsGuard(t *testing.T) {
	f := &fakeReviews{tokens: map[string]string{"reader-token": "reader", "nobody-token": "nobody"}, allowed: map[string]bool{"reader": true}}
	h := f.guard(t).wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, c := range []struct {
		name, path, authorization string
		want                      int
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized},
		{"not a bearer token", "/metrics", "Basic cmVhZGVy", http.StatusUnauthorized},
		{"a token the API server does not know", "/metrics", "Bearer forged", http.StatusUnauthorized},
		{"a user RBAC does not allow", "/metrics", "Bearer nobody-token", http.StatusForbidden},
		{"a user RBAC allows", "/metrics", "Bearer reader-token", http.StatusOK},
		{"the scheme in lower case", "/metrics", "bearer reader-token", http.StatusOK},
		{"a path the user may not get", "/debug/pprof/", "Bearer reader-token", http.StatusForbidden},
	} {
		if got := get(h, c.path, c.authorization); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// Asked again, every answer comes from the cache.
	tokens, access := f.tokenReviews, f.accessReviews
	for range 3 {
		get(h, "/metrics", "Bearer reader-token")
		get(h, "/metrics", "Bearer nobody-token")
		get(h, "/metrics", "Bearer forged")
	}
	if f.tokenReviews != tokens || f.accessReviews != access {
		t.Errorf("repeated requests made %d token and %d access reviews, want none", f.tokenReviews-tokens, f.accessReviews-access)
	}
}

func TestMetricsGuardDoesNotRememberAnAPIServerError(t *testing.T) {
	f := &fakeReviews{tokens: map[string]string{"reader-token": "reader"}, allowed: map[string]bool{"reader": true}, fail: true}
	h := f.guard(t).wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if got := get(h, "/metrics", "Bearer reader-token"); got != http.StatusUnauthorized {
		t.Fatalf("API server down: %d, want 401", got)
	}
	f.fail = false
	if got := get(h, "/metrics", "Bearer reader-token"); got != http.StatusOK {
		t.Fatalf("API server back: %d, want 200", got)
	}
}

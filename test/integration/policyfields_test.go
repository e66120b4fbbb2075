package integration

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// The admission policies are allow-lists: every field of the object the
// API defines is held to its old value except those the identity needs.
// A field the API gains (a Kubernetes upgrade, a new NodeConfig field)
// fails here until the policy names it.
func TestThePoliciesHoldEveryFieldTheyDoNotAllow(t *testing.T) {
	// Server-managed on every write, or changed by the API server itself.
	serverSet := []string{"resourceVersion", "managedFields"}
	for _, tc := range []struct {
		file, policy string
		// path in the expressions -> the API type whose fields it holds
		// -> the fields allowed to change (checked apart or server-set).
		held map[string]heldFields
		// whole objects compared at once
		whole []string
	}{
		{"rbac.yaml", "nodeconfig-status-own-node", map[string]heldFields{
			"metadata": {metav1.ObjectMeta{}, append([]string{"annotations"}, serverSet...)},
			"status":   {corev1.NodeStatus{}, []string{"conditions"}},
		}, []string{"spec"}},
		{"rbac.yaml", "nodeconfig-agent-own-node", map[string]heldFields{
			"metadata": {metav1.ObjectMeta{}, serverSet},
			// A drain's cordon.
			"spec": {corev1.NodeSpec{}, []string{"unschedulable"}},
		}, []string{"status"}},
		{"rbac.yaml", "nodeconfig-reconciler-abandon-mark", map[string]heldFields{
			"metadata": {metav1.ObjectMeta{}, append([]string{"annotations"}, serverSet...)},
		}, []string{"spec"}},
		{"roles.yaml", "nodeconfig-configure", map[string]heldFields{
			// generation follows any change of the spec, pausing included;
			// the rest of the metadata cannot change in an update.
			"metadata":      {metav1.ObjectMeta{}, append([]string{"generation", "name", "generateName", "namespace", "selfLink", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"}, serverSet...)},
			"spec":          {v1alpha1.NodeConfigSpec{}, []string{"rollout"}},
			"spec.?rollout": {v1alpha1.Rollout{}, []string{"paused"}},
		}, nil},
	} {
		p := admissionPolicy(t, tc.file, tc.policy)
		var all strings.Builder
		for _, v := range p.Spec.Variables {
			all.WriteString(v.Expression + "\n")
		}
		for _, v := range p.Spec.Validations {
			all.WriteString(v.Expression + "\n")
		}
		exprs := all.String()
		for path, h := range tc.held {
			for _, f := range jsonFields(h.of) {
				if slices.Contains(h.allowed, f) {
					continue
				}
				want := "object." + path + ".?" + f + " == oldObject." + path + ".?" + f
				if !strings.Contains(exprs, want) {
					t.Errorf("%s does not hold %s.%s: want %q", tc.policy, path, f, want)
				}
			}
		}
		for _, w := range tc.whole {
			if want := "object." + w + " == oldObject." + w; !strings.Contains(exprs, want) {
				t.Errorf("%s does not hold %s: want %q", tc.policy, w, want)
			}
		}
	}
}

type heldFields struct {
	of      any
	allowed []string
}

// jsonFields are the names a type's fields have in JSON.
func jsonFields(v any) []string {
	typ := reflect.TypeOf(v)
	var names []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// admissionPolicy reads the named ValidatingAdmissionPolicy from a file of deploy/.
func admissionPolicy(t *testing.T, file, name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	deployObject(t, file, "ValidatingAdmissionPolicy", name, &p)
	return &p
}

// deployObject decodes into out the object of kind named name in
// deploy/file.
func deployObject(t *testing.T, file, kind, name string, out any) {
	t.Helper()
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "deploy", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var doc map[string]any
		if err := docs.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if u := (unstructured.Unstructured{Object: doc}); doc != nil && u.GetKind() == kind && u.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(doc, out); err != nil {
				t.Fatalf("%s: %s %s: %v", file, kind, name, err)
			}
			return
		}
	}
	t.Fatalf("no %s %s in deploy/%s", kind, name, file)
}

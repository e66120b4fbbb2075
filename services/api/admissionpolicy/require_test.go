package admissionpolicy

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

const name = "nodeconfig-status-own-node"

func installed() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionregistrationv1.Fail
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail},
		}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
}

func TestRequire(t *testing.T) {
	ignore := admissionregistrationv1.Ignore
	for _, tc := range []struct {
		what   string
		change func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object
		want   string
	}{
		{"as shipped", nil, ""},
		{"failure policy left out (Fail)", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			p.Spec.FailurePolicy = nil
			return []runtime.Object{p, b}
		}, ""},
		{"no policy", func(_ *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			return []runtime.Object{b}
		}, "ValidatingAdmissionPolicy " + name + " is missing"},
		{"no binding", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			return []runtime.Object{p}
		}, "ValidatingAdmissionPolicyBinding " + name + " is missing"},
		{"fails open", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			p.Spec.FailurePolicy = &ignore
			return []runtime.Object{p, b}
		}, "failurePolicy Ignore"},
		{"binds another policy", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			b.Spec.PolicyName = "other"
			return []runtime.Object{p, b}
		}, `binds policy "other"`},
		{"only warns", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
			return []runtime.Object{p, b}
		}, "without Deny"},
		{"narrowed", func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"none": "x"}}}
			return []runtime.Object{p, b}
		}, "narrows the policy"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			p, b := installed()
			objs := []runtime.Object{p, b}
			if tc.change != nil {
				objs = tc.change(p, b)
			}
			err := Require(context.Background(), fake.NewClientset(objs...).AdmissionregistrationV1(), name)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

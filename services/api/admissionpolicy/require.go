// Package admissionpolicy checks, before a service writes to the cluster,
// that the ValidatingAdmissionPolicy confining it is installed and
// enforced. RBAC cannot say "its own Node" nor "only this annotation": it
// lets statusd patch every Node's status and the reconciler every Node,
// and the policy is what narrows that. A policy or binding deleted or
// loosened would go unnoticed, so the service refuses to start instead.
package admissionpolicy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
)

// Require returns an error naming what is wrong unless the policy name and
// a binding of the same name exist, the policy fails closed, and the
// binding denies what it refuses for every object the policy matches.
func Require(ctx context.Context, c admissionclient.AdmissionregistrationV1Interface, name string) error {
	p, err := c.ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return describe("ValidatingAdmissionPolicy", name, err)
	}
	if fp := p.Spec.FailurePolicy; fp != nil && *fp != admissionregistrationv1.Fail {
		return fmt.Errorf("ValidatingAdmissionPolicy %s has failurePolicy %s: it must be Fail, or a policy that cannot be evaluated lets every write through", name, *fp)
	}
	b, err := c.ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return describe("ValidatingAdmissionPolicyBinding", name, err)
	}
	switch {
	case b.Spec.PolicyName != name:
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s binds policy %q, not %s", name, b.Spec.PolicyName, name)
	case !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny):
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s has validationActions %v: without Deny the policy refuses nothing", name, b.Spec.ValidationActions)
	case b.Spec.MatchResources != nil:
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s narrows the policy with matchResources: the shipped binding applies it to everything it matches", name)
	case b.Spec.ParamRef != nil:
		return fmt.Errorf("ValidatingAdmissionPolicyBinding %s sets a paramRef the policy does not use", name)
	}
	return nil
}

func describe(kind, name string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s is missing: install it from deploy/rbac.yaml (without it RBAC alone lets this service write far more than it needs)", kind, name)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("cannot read %s %s to check it is installed: %w (deploy/rbac.yaml grants get on it)", kind, name, err)
	}
	return fmt.Errorf("check %s %s: %w", kind, name, err)
}

// AtStart is Require for a service's start, of each of names (a
// comma-separated list), with the flag's name in the error; an empty list
// is a choice to run without the check, logged.
func AtStart(log *slog.Logger, c admissionclient.AdmissionregistrationV1Interface, names string) error {
	if names == "" {
		log.Warn("not checking that an admission policy confines this service (--admission-policy is empty)")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range strings.Split(names, ",") {
		if err := Require(ctx, c, strings.TrimSpace(name)); err != nil {
			return fmt.Errorf("--admission-policy: %w", err)
		}
	}
	return nil
}

//go:build !crdschema

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// LabelSelector is metav1.LabelSelector. (When controller-gen loads this
// package with the crdschema build tag, it is labelSelector instead, the
// stricter schema of spec.nodeSelector in the CRD: see selector.go.)
type LabelSelector = metav1.LabelSelector

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodeconfigclient "nodeconfig.io/services/api/client/clientset/typed/api/v1alpha1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// configMap creates or updates a ConfigMap and returns it.
func (e *env) configMap(name string, data map[string]string) *corev1.ConfigMap {
	e.t.Helper()
	cms := e.c.Client.CoreV1().ConfigMaps(e.ns)
	cm, err := cms.Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
	} else if err == nil {
		cm.Data = data
		cm, err = cms.Update(e.ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return cm
}

// nodeConfig creates or replaces the test's NodeConfig.
func (e *env) nodeConfig(name string, spec map[string]any, annotations map[string]string) {
	e.t.Helper()
	if spec["nodeSelector"] == nil {
		spec["nodeSelector"] = map[string]any{"matchLabels": map[string]any{"e2e": e.label}}
	}
	typed, err := specOf(spec)
	if err != nil {
		e.t.Fatal(err)
	}
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: typed}
	client := e.nodeConfigs()
	cur, err := client.Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.Create(e.ctx, nc, metav1.CreateOptions{})
	} else if err == nil {
		nc.ResourceVersion = cur.ResourceVersion
		nc.Finalizers = cur.Finalizers
		_, err = client.Update(e.ctx, nc, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { e.resetNowAndDelete(name) })
}

// specOf is a spec as the tests write it (the CRD's JSON) in the Go type. A
// field the type does not have fails rather than being dropped; the specs
// the type cannot hold (tryNodeConfig's) go as written.
func specOf(spec map[string]any) (v1alpha1.NodeConfigSpec, error) {
	var typed v1alpha1.NodeConfigSpec
	raw, err := json.Marshal(spec)
	if err != nil {
		return typed, err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&typed); err != nil {
		return typed, fmt.Errorf("spec %s: %w", raw, err)
	}
	return typed, nil
}

// nodeConfigs is the typed client of the NodeConfigs.
func (e *env) nodeConfigs() nodeconfigclient.NodeConfigInterface {
	return e.ncs.NodeConfigV1alpha1().NodeConfigs()
}

// resetNowAndDelete deletes a test's NodeConfig through the emergency exit,
// so that a paused one, or one outside its windows, lets its nodes go at
// once: the next test starts from local defaults.
func (e *env) resetNowAndDelete(name string) {
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationResetNow + `":"true"}}}`)
	_, err := e.nodeConfigs().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("mark NodeConfig %s %s: %v", name, v1alpha1.AnnotationResetNow, err)
	}
	e.deleteNodeConfigAndWait(name)
}

func (e *env) use(name, cmName string, extra map[string]any) {
	e.t.Helper()
	spec := map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": cmName, "key": "config.yaml"}},
		"soakSeconds": int64(2),
	}
	for k, v := range extra {
		spec[k] = v
	}
	e.nodeConfig(name, spec, nil)
}

func (e *env) deleteNodeConfigAndWait(name string) {
	client := e.nodeConfigs()
	if err := client.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("delete NodeConfig %s: %v", name, err)
		return
	}
	err := proc.WaitFor(30*time.Second, func() (bool, error) {
		_, err := client.Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if err != nil {
		e.t.Errorf("NodeConfig %s not gone: %v", name, err)
	}
}

// nodeConfigNow reads the NodeConfig as the API server has it.
func (e *env) nodeConfigNow(name string) (*v1alpha1.NodeConfig, error) {
	nc, err := e.nodeConfigs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return nc, nil
}

// waitNodeConfig waits until check accepts the NodeConfig, and fails the
// test with its last status when timeout passes first.
func (e *env) waitNodeConfig(name string, timeout time.Duration, what string, check func(nc *v1alpha1.NodeConfig) bool) *v1alpha1.NodeConfig {
	e.t.Helper()
	var last *v1alpha1.NodeConfig
	err := proc.WaitFor(timeout, func() (bool, error) {
		nc, err := e.nodeConfigNow(name)
		if err != nil {
			return false, err
		}
		last = nc
		return check(nc), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status
		}
		e.t.Fatalf("NodeConfig %s: waiting for %s: %v (status %+v)", name, what, err, status)
	}
	return last
}

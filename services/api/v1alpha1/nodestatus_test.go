package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The annotation is the core API's NodeConfigStatus as JSON: what statusd
// writes reads back the same, and its field names are core/v1's.
func TestNodeConfigStatusCodec(t *testing.T) {
	src := &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{
		Namespace: "ns", Name: "cm", UID: "u", ResourceVersion: "7", KubeletConfigKey: "config.yaml"}}
	st := corev1.NodeConfigStatus{Assigned: src, Active: src, Error: "bad yaml"}
	value, err := EncodeNodeConfigStatus(st)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"assigned":{"configMap":{"namespace":"ns","name":"cm","uid":"u","resourceVersion":"7","kubeletConfigKey":"config.yaml"}},` +
		`"active":{"configMap":{"namespace":"ns","name":"cm","uid":"u","resourceVersion":"7","kubeletConfigKey":"config.yaml"}},"error":"bad yaml"}`
	if value != want {
		t.Fatalf("encoded\n%s\nwant\n%s", value, want)
	}
	if empty, _ := EncodeNodeConfigStatus(corev1.NodeConfigStatus{}); empty != "{}" {
		t.Errorf("nothing assigned encodes as %s, want {}", empty)
	}
	got, ok, err := NodeConfigStatusOf(map[string]string{NodeAnnotationConfigStatus: value})
	if err != nil || !ok || got.Assigned.ConfigMap.ResourceVersion != "7" || got.Active.ConfigMap.KubeletConfigKey != "config.yaml" ||
		got.LastKnownGood != nil || got.Error != "bad yaml" {
		t.Fatalf("decoded %+v, %v, %v", got, ok, err)
	}
}

func TestNodeConfigStatusOfANodeThatHasNotReported(t *testing.T) {
	if _, ok, err := NodeConfigStatusOf(map[string]string{"other": "x"}); ok || err != nil {
		t.Errorf("without the annotation: ok %v, err %v; want not ok and no error", ok, err)
	}
	if _, ok, err := NodeConfigStatusOf(map[string]string{NodeAnnotationConfigStatus: "{"}); !ok || err == nil {
		t.Errorf("an annotation that is not JSON: ok %v, err %v; want ok and an error", ok, err)
	}
	// A field of the wrong type is an error, and the others still read.
	st, err := DecodeNodeConfigStatus(`{"assigned": "x", "error": "kept"}`)
	if err == nil || st.Error != "kept" {
		t.Errorf("a wrong field: %+v, %v; want the error read and an error", st, err)
	}
}

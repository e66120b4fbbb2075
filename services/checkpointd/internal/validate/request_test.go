package validate

import (
	"fmt"
	"strings"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func TestKeyRefusesTraversalAndSeparators(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "../x", `a\b`, "a b", strings.Repeat("k", 254), "nul\x00"} {
		if Key(bad) == nil {
			t.Errorf("Key(%q) accepted", bad)
		}
	}
	for _, good := range []string{"config.yaml", "kubelet", "a-b_c.d", strings.Repeat("k", 253)} {
		if err := Key(good); err != nil {
			t.Errorf("Key(%q): %v", good, err)
		}
	}
}

func TestSourceNamesEveryProblem(t *testing.T) {
	err := Source(&nodeconfigv1.ConfigSource{Name: "Bad_Name"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"empty UID is ambiguous", "resource_version is empty", "source.key is empty", "source.namespace is empty", "source.name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestDataLimits(t *testing.T) {
	many := map[string]string{}
	for i := range 10000 {
		many[fmt.Sprintf("key-%05d", i)] = strings.Repeat("v", 120)
	}
	many["config.yaml"] = "a: 1"
	if err := Data(many, "config.yaml"); err == nil || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("10,000 keys over 1 MiB: %v", err)
	}
}

// FuzzRequest: request validation never panics, and anything it accepts
// is a safe bbolt key and file-free key name.
func FuzzRequest(f *testing.F) {
	f.Add("uid", "1", "config.yaml")
	f.Add("", "", "../../etc/passwd")
	f.Add("a/b", "1", "..")
	f.Fuzz(func(t *testing.T, uid, rv, key string) {
		if Version(uid, rv) == nil && (strings.Contains(uid, "/") || strings.Contains(rv, "/") || uid == "" || rv == "") {
			t.Fatalf("accepted uid %q rv %q", uid, rv)
		}
		if Key(key) == nil && (strings.ContainsAny(key, `/\`) || key == ".." || key == ".") {
			t.Fatalf("accepted key %q", key)
		}
	})
}

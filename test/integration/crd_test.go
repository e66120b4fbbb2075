package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", cluster.Shared.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The API server refuses invalid NodeConfigs with a clear message, and
// `kubectl explain` documents the schema.
func TestInvalidNodeConfigIsRefusedByTheAPIServer(t *testing.T) {
	for name, tc := range map[string]struct{ spec, want string }{
		"no selector":        {"source: {configMap: {namespace: a, name: b, key: c}}", "spec.nodeSelector: Required value"},
		"bad validator":      {"nodeSelector: {}\nvalidator: toml", `Unsupported value: "toml"`},
		"soak zero":          {"nodeSelector: {}\nsoakSeconds: 0", "spec.soakSeconds"},
		"key traversal":      {"nodeSelector: {}\nsource: {configMap: {namespace: a, name: b, key: ../etc}}", "spec.source.configMap.key"},
		"key dot dot":        {"nodeSelector: {}\nsource: {configMap: {namespace: a, name: b, key: ..}}", "key must not be '.' or '..'"},
		"missing key":        {"nodeSelector: {}\nsource: {configMap: {namespace: a, name: b}}", "spec.source.configMap.key: Required value"},
		"maxInTrial 0%":      {"nodeSelector: {}\nrollout: {maxInTrial: 0%}", "maxInTrial must be"},
		"maxInTrial 0":       {"nodeSelector: {}\nrollout: {maxInTrial: 0}", "maxInTrial must be"},
		"window day":         {"nodeSelector: {}\nrollout: {windows: [{days: [Funday], start: '01:00', end: '02:00'}]}", "Unsupported value"},
		"window time":        {"nodeSelector: {}\nrollout: {windows: [{start: '25:00', end: '02:00'}]}", "should match"},
		"empty window":       {"nodeSelector: {}\nrollout: {windows: [{start: '02:00', end: '02:00'}]}", "start and end must differ"},
		"negative failures":  {"nodeSelector: {}\nrollout: {maxFailures: -1}", "spec.rollout.maxFailures"},
		"prometheus no url":  {"nodeSelector: {}\nhealth: {prometheus: {url: 'not a url', query: up}}", "url must be an http or https URL"},
		"prometheus file":    {"nodeSelector: {}\nhealth: {prometheus: {url: 'file:///etc/passwd', query: up}}", "url must be an http or https URL"},
		"prometheus query":   {"nodeSelector: {}\nhealth: {prometheus: {url: 'http://127.0.0.1:9090'}}", "spec.health.prometheus.query: Required value"},
		"condition status":   {"nodeSelector: {}\nhealth: {conditions: [{type: KernelDeadlock, status: Maybe}]}", `Unsupported value: "Maybe"`},
		"topology key space": {"nodeSelector: {}\nrollout: {topologyKey: 'my zone'}", "topologyKey must be a node label key"},
		"topology key slash": {"nodeSelector: {}\nrollout: {topologyKey: 'a/b/c'}", "topologyKey must be a node label key"},
		"topology key long":  {"nodeSelector: {}\nrollout: {topologyKey: 'example.com/" + strings.Repeat("z", 64) + "'}", "topologyKey must be a node label key"},
		"topology key empty": {"nodeSelector: {}\nrollout: {topologyKey: ''}", "topologyKey must be a node label key"},
		"drain bound 0":      {"nodeSelector: {}\nrollout: {drain: {timeoutSeconds: 0}}", "spec.rollout.drain.timeoutSeconds: Invalid value: 0"},
		"drain bound -1":     {"nodeSelector: {}\nrollout: {drain: {timeoutSeconds: -1}}", "spec.rollout.drain.timeoutSeconds: Invalid value: -1"},
		"drain when":         {"nodeSelector: {}\nrollout: {drain: {when: Sometimes}}", `Unsupported value: "Sometimes"`},
	} {
		t.Run(name, func(t *testing.T) {
			doc := "apiVersion: nodeconfig.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: invalid}\nspec:\n  " + strings.ReplaceAll(tc.spec, "\n", "\n  ") + "\n"
			out, err := kubectl(t, doc, "apply", "-f", "-")
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("apply: err=%v, want refusal containing %q:\n%s", err, tc.want, out)
			}
		})
	}
	out, err := kubectl(t, "", "explain", "nodeconfig.spec")
	if err != nil || !strings.Contains(out, "soakSeconds") || !strings.Contains(out, "last-known-good") {
		t.Fatalf("kubectl explain nodeconfig.spec: %v\n%s", err, out)
	}
	// A valid one (a topologyKey with a prefix) gets its defaults and a
	// readable table.
	doc := "apiVersion: nodeconfig.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: valid-table}\nspec:\n  nodeSelector: {matchLabels: {nobody: here}}\n  source: {configMap: {namespace: a, name: cm, key: k}}\n" +
		"  rollout: {topologyKey: topology.kubernetes.io/zone}\n"
	if out, err := kubectl(t, doc, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply valid: %v\n%s", err, out)
	}
	defer kubectl(t, "", "delete", "nodeconfig", "valid-table", "--wait=false")
	out, err = kubectl(t, "", "get", "nodeconfig", "valid-table", "-o", "jsonpath={.spec.validator} {.spec.soakSeconds} {.spec.rollout.maxInTrial} {.spec.rollout.maxFailures}")
	if err != nil || out != "yaml 600 10% 1" {
		t.Fatalf("defaults = %q (%v), want \"yaml 600 10%% 1\"", out, err)
	}
	out, err = kubectl(t, "", "get", "nodeconfigs")
	if err != nil || !strings.Contains(out, "SOURCE") || !strings.Contains(out, "valid-table") || !strings.Contains(out, "cm") {
		t.Fatalf("kubectl get nodeconfigs: %v\n%s", err, out)
	}
}

// buf breaking is wired: removing a field from a contract fails it.
func TestBufBreakingCatchesRemovedField(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	buf := filepath.Join(root, "bin", "buf")
	dir := t.TempDir()
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	copyFile := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("buf.yaml")
	protos, _ := filepath.Glob(filepath.Join(root, "proto/nodeconfig/v1/*.proto"))
	for _, p := range protos {
		rel, _ := filepath.Rel(root, p)
		copyFile(rel)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-qm", "base"}} {
		if out, err := run("git", args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := run(buf, "breaking", "--against", ".git#branch=main"); err != nil {
		t.Fatalf("unchanged contracts reported as breaking: %v\n%s", err, out)
	}
	typesPath := filepath.Join(dir, "proto/nodeconfig/v1/types.proto")
	b, _ := os.ReadFile(typesPath)
	edited := strings.Replace(string(b), "  string key = 5;\n", "", 1)
	if edited == string(b) {
		t.Fatal("could not find the field to remove")
	}
	if err := os.WriteFile(typesPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(buf, "breaking", "--against", ".git#branch=main")
	if err == nil || !strings.Contains(out, "deleted") {
		t.Fatalf("removing ConfigSource.key was not caught: %v\n%s", err, out)
	}
}

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeKubeletCheck is a stand-in for nodeconfig-kubelet-check with its
// contract (stdin in; exit 0 valid; exit 1 and the reason on stdout): it
// refuses a drop-in that says "bogus". The real binary's words are
// checked in test/integration.
func fakeKubeletCheck(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodeconfig-kubelet-check")
	script := "#!/bin/sh\nif grep -q bogus; then echo 'hairpinMode: Invalid value: \"bogus\": fake kubelet words'; exit 1; fi\nexit 0\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const demoNodeConfig = `apiVersion: nodeconfig.io/v1alpha1
kind: NodeConfig
metadata:
  name: demo
spec:
  nodeSelector:
    matchLabels:
      nodeconfig.io/demo: "true"
  validator: kubelet
  source:
    configMap:
      namespace: nodeconfig-demo
      name: kubelet-config
      key: config.yaml
`

func demoConfigMap(payload string) string {
	return `apiVersion: v1
kind: ConfigMap
metadata:
  namespace: nodeconfig-demo
  name: kubelet-config
data:
  config.yaml: |
` + indent(payload)
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}

const goodPayload = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n"

// validate runs the reconciler's central check offline: a NodeConfig's
// payload from the ConfigMap it names, judged by its validator, through the
// field policy first; the exit status says refused (1) or no verdict (2).
func TestValidate(t *testing.T) {
	check := fakeKubeletCheck(t)
	c := newFleet(1, fleetDesign).clients()
	bad := strings.Replace(goodPayload, "maxPods: 110", "hairpinMode: bogus", 1)
	for _, tc := range []struct {
		name    string
		file    string
		flags   []string
		code    int
		outputs []string
	}{
		{"a good NodeConfig and its ConfigMap", demoNodeConfig + "---\n" + demoConfigMap(goodPayload), nil, 0,
			[]string{"NodeConfig demo (", ": payload ConfigMap nodeconfig-demo/kubelet-config key config.yaml, validator kubelet: passed\n", "1 passed, 0 refused, 0 unjudged\n"}},
		{"the kubelet's words on a bad payload", demoNodeConfig + "---\n" + demoConfigMap(bad), nil, 1,
			[]string{`validator kubelet: refused: invalid KubeletConfiguration: hairpinMode: Invalid value: "bogus": fake kubelet words`}},
		{"a bare drop-in", bad, nil, 1, []string{"KubeletConfiguration (", "refused: invalid KubeletConfiguration: hairpinMode"}},
		{"a field the policy refuses", goodPayload + "readOnlyPort: 10255\n", nil, 1, []string{"refused: the field policy refuses readOnlyPort"}},
		{"a field an operator allows", goodPayload + "readOnlyPort: 10255\n", []string{"--allow-kubelet-fields=readOnlyPort"}, 0, []string{"passed"}},
		{"validator none without the opt-in", demoConfigMap(goodPayload), []string{"--validator", "none"}, 1, []string{"refused: validator: none is refused"}},
		{"the ConfigMap missing", demoNodeConfig, nil, 2, []string{"unjudged: ConfigMap nodeconfig-demo/kubelet-config is not in the files given"}},
		{"a selector that does not parse", strings.Replace(demoNodeConfig, `matchLabels:
      nodeconfig.io/demo: "true"`, `matchExpressions: [{key: a, operator: Bogus}]`, 1) + "---\n" + demoConfigMap(goodPayload), nil, 1, []string{"refused: InvalidSelector"}},
		{"a misspelt field", strings.Replace(demoNodeConfig, "validator:", "validatorr:", 1), nil, 1, []string{`refused: does not decode as a NodeConfig: error unmarshaling JSON: while decoding JSON: json: unknown field "validatorr"`}},
		{"no kubelet validator", bad, []string{"--kubelet-check-binary", "/nonexistent/nodeconfig-kubelet-check"}, 2, []string{"unjudged: the kubelet validator could not run"}},
		{"a kind it does not check", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", nil, 1, []string{"a Secret, which validate does not check"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"validate", "-f", writeFile(t, tc.file), "--kubelet-check-binary", check}, tc.flags...)
			out, stderr, code := runFake(c, args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, stderr)
			}
			for _, want := range tc.outputs {
				if !strings.Contains(out+stderr, want) {
					t.Errorf("does not say %q:\n%s%s", want, out, stderr)
				}
			}
		})
	}
}

func TestValidateJSON(t *testing.T) {
	check := fakeKubeletCheck(t)
	c := newFleet(1, fleetDesign).clients()
	bad := strings.Replace(goodPayload, "maxPods: 110", "hairpinMode: bogus", 1)
	out, _, code := runFake(c, "validate", "-f", writeFile(t, demoNodeConfig+"---\n"+demoConfigMap(bad)), "--kubelet-check-binary", check, "-o", "json")
	var r struct {
		Checks []struct {
			Object, Payload, Validator, Verdict, Reason string
			Document                                    int
		} `json:"checks"`
		Refused int `json:"refused"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if code != 1 || r.Refused != 1 || len(r.Checks) != 1 || r.Checks[0].Object != "NodeConfig demo" || r.Checks[0].Verdict != "Refused" ||
		r.Checks[0].Document != 1 || !strings.Contains(r.Checks[0].Reason, "fake kubelet words") {
		t.Errorf("exit %d, %+v", code, r)
	}
}

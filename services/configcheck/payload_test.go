package configcheck

import (
	"context"
	"errors"
	"strings"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// inProcess is the checker of the nodes: the kubelet's code in process.
var inProcess = Checker{Kubelet: kubeletcheck.Check}

const kubeletOK = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: 110
imageGCHighThresholdPercent: 85
imageGCLowThresholdPercent: 80
`

func TestPayloadValidators(t *testing.T) {
	for _, tc := range []struct {
		name      string
		validator nodeconfigv1.Validator
		payload   string
		wantErr   string // "" = valid
	}{
		{"yaml ok", nodeconfigv1.Validator_VALIDATOR_YAML, "a: 1\nb: [1, 2]\n", ""},
		{"yaml syntax names the line", nodeconfigv1.Validator_VALIDATOR_YAML, "a: 1\nb: [1\n", "line"},
		{"yaml duplicate key", nodeconfigv1.Validator_VALIDATOR_YAML, "a: 1\na: 2\n", "already set"},
		{"unspecified is yaml", nodeconfigv1.Validator_VALIDATOR_UNSPECIFIED, "a: [", "invalid YAML"},
		{"json ok", nodeconfigv1.Validator_VALIDATOR_JSON, `{"a": 1}`, ""},
		{"json invalid", nodeconfigv1.Validator_VALIDATOR_JSON, `{"a": }`, "invalid JSON"},
		{"json duplicate key", nodeconfigv1.Validator_VALIDATOR_JSON, `{"a": 1, "a": 2}`, "invalid JSON"},
		{"none accepts anything", nodeconfigv1.Validator_VALIDATOR_NONE, "\x00garbage[", ""},
		{"kubelet ok", nodeconfigv1.Validator_VALIDATOR_KUBELET, kubeletOK, ""},
		// The kubelet only warns about a field it does not know (it may be newer than these types).
		{"kubelet unknown field", nodeconfigv1.Validator_VALIDATOR_KUBELET, kubeletOK + "maxPodz: 3\n", ""},
		{"kubelet duplicate field", nodeconfigv1.Validator_VALIDATOR_KUBELET, kubeletOK + "maxPods: 3\n", "already set"},
		{"kubelet wrong kind", nodeconfigv1.Validator_VALIDATOR_KUBELET, strings.Replace(kubeletOK, "KubeletConfiguration", "Pod", 1), "apiVersion/kind"},
		{"kubelet missing apiVersion", nodeconfigv1.Validator_VALIDATOR_KUBELET, "kind: KubeletConfiguration\n", "apiVersion/kind"},
		{"kubelet negative maxPods", nodeconfigv1.Validator_VALIDATOR_KUBELET, strings.Replace(kubeletOK, "110", "-1", 1), "maxPods"},
		{"kubelet gc thresholds inverted", nodeconfigv1.Validator_VALIDATOR_KUBELET, strings.Replace(kubeletOK, "80", "90", 1), "imageGCLowThresholdPercent"},
		{"kubelet wrong type", nodeconfigv1.Validator_VALIDATOR_KUBELET, strings.Replace(kubeletOK, "110", `"many"`, 1), "maxPods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := inProcess.Payload(context.Background(), tc.validator, []byte(tc.payload))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// The kubelet validator is the caller's: its refusal reads as the
// kubelet's, and its failure to run is no verdict at all.
func TestKubeletValidatorIsPluggedIn(t *testing.T) {
	ctx := context.Background()
	kubelet := nodeconfigv1.Validator_VALIDATOR_KUBELET
	refusing := Checker{Kubelet: func(context.Context, []byte) error { return errors.New("maxPods: Invalid value: -1") }}
	if err := refusing.Payload(ctx, kubelet, nil); err == nil || err.Error() != "invalid KubeletConfiguration: maxPods: Invalid value: -1" || Unavailable(err) {
		t.Fatalf("refusal %v, want the kubelet's words after \"invalid KubeletConfiguration: \"", err)
	}
	broken := errors.New("/bin/nodeconfig-kubelet-check: signal: killed")
	crashing := Checker{Kubelet: func(context.Context, []byte) error { return &UnavailableError{Validator: "kubelet", Err: broken} }}
	if err := crashing.Payload(ctx, kubelet, nil); !Unavailable(err) || !errors.Is(err, broken) || strings.Contains(err.Error(), "invalid") {
		t.Fatalf("failure to run %v, want an UnavailableError that says no verdict", err)
	}
	var none Checker
	if err := none.Payload(ctx, kubelet, []byte(kubeletOK)); !Unavailable(err) {
		t.Fatalf("no kubelet validator: %v, want an UnavailableError", err)
	}
	if err := none.Payload(ctx, nodeconfigv1.Validator_VALIDATOR_YAML, []byte("a: 1\n")); err != nil {
		t.Fatalf("the other validators need no plug: %v", err)
	}
}

func TestDeepNestingIsRefusedNotACrash(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for _, v := range []nodeconfigv1.Validator{nodeconfigv1.Validator_VALIDATOR_YAML, nodeconfigv1.Validator_VALIDATOR_JSON, nodeconfigv1.Validator_VALIDATOR_KUBELET} {
		if err := inProcess.Payload(context.Background(), v, []byte(deep)); err == nil {
			t.Fatalf("%v accepted 100000 levels of nesting", v)
		}
	}
}

// FuzzPayload: no payload makes a validator panic or hang.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{kubeletOK, "a: 1", "{}", "[", "\x00", "a: &a [*a]", strings.Repeat("{", 50)} {
		f.Add(s, int32(1))
		f.Add(s, int32(3))
	}
	f.Fuzz(func(t *testing.T, payload string, v int32) {
		_ = inProcess.Payload(context.Background(), nodeconfigv1.Validator(v%5), []byte(payload))
	})
}

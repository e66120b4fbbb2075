package fieldpolicy

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func TestParseAllowed(t *testing.T) {
	tests := []struct {
		name string
		list []string
		want []string
	}{
		{name: "nothing", list: nil, want: nil},
		{name: "empty flag", list: []string{""}, want: nil},
		{name: "one flag value", list: []string{"readOnlyPort,clusterDNS"}, want: []string{"clusterDNS", "readOnlyPort"}},
		{name: "repeated flag", list: []string{" clusterDNS ", "readOnlyPort,", "clusterDNS"}, want: []string{"clusterDNS", "readOnlyPort"}},
		{name: "field beneath a refused object", list: []string{"authorization.webhook.cacheAuthorizedTTL"}, want: []string{"authorization.webhook.cacheAuthorizedTTL"}},
		{name: "object beneath a refused object", list: []string{"authentication.webhook"}, want: []string{"authentication.webhook"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseAllowed(tt.list)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Allowed, tt.want) {
				t.Errorf("Allowed = %v, want %v", p.Allowed, tt.want)
			}
		})
	}
}

func TestParseAllowedRefusesUnknownPaths(t *testing.T) {
	tests := []struct {
		name string
		list []string
		// mention must all appear in the error.
		mention []string
	}{
		{
			name:    "typo in case",
			list:    []string{"readOnlyport"},
			mention: []string{`"readOnlyport" (did you mean "readOnlyPort"?) is not`},
		},
		{
			// A field the policy does not refuse needs no allowing: it
			// is most likely a mistake for another.
			name:    "field the policy does not refuse",
			list:    []string{"clusterDNS,maxPods"},
			mention: []string{`"maxPods" is not`},
		},
		{
			name:    "sub-field in the wrong object",
			list:    []string{"authorization.webhook.cacheTTL"},
			mention: []string{`"authorization.webhook.cacheTTL" is not`},
		},
		{
			name:    "beneath a leaf",
			list:    []string{"readOnlyPort.port"},
			mention: []string{`"readOnlyPort.port" is not`},
		},
		{
			name:    "several",
			list:    []string{"staticPodDir", "clusterDns"},
			mention: []string{`"staticPodDir", "clusterDns" (did you mean "clusterDNS"?) are not`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAllowed(tt.list)
			if err == nil {
				t.Fatalf("ParseAllowed(%q) accepted it", tt.list)
			}
			// Every known path is listed, so the operator can pick one.
			mention := append([]string{"--allow-kubelet-fields: ", "readOnlyPort, registerWithTaints", "authorization.webhook.cacheAuthorizedTTL"}, tt.mention...)
			for _, m := range mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("the error does not say %q:\n%v", m, err)
				}
			}
		})
	}
}

func TestRulesAdmit(t *testing.T) {
	var r Rules
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	r.Register(fs)
	if err := fs.Parse([]string{"--" + AllowFlag, "clusterDNS"}); err != nil {
		t.Fatal(err)
	}
	dns := []byte("clusterDNS: [10.0.0.10]\n")
	if err := r.Admit(nodeconfigv1.Validator_VALIDATOR_KUBELET, dns); err != nil {
		t.Fatalf("an allowed field: %v", err)
	}
	if err := r.Admit(nodeconfigv1.Validator_VALIDATOR_KUBELET, []byte("readOnlyPort: 10255\n")); !errors.As(err, new(*RefusedError)) {
		t.Fatalf("a refused field: %v", err)
	}
	if err := r.Admit(nodeconfigv1.Validator_VALIDATOR_NONE, []byte("maxPods: 9\n")); !errors.Is(err, ErrValidatorNone) {
		t.Fatalf("validator none without the opt-in: %v", err)
	}
	if err := fs.Parse([]string{"--" + ValidatorNoneFlag}); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(nodeconfigv1.Validator_VALIDATOR_NONE, []byte("maxPods: 9\n")); err != nil {
		t.Fatalf("validator none with the opt-in: %v", err)
	}
	if err := fs.Parse([]string{"--" + AllowFlag, "maxpods"}); err == nil {
		t.Fatal("a field the policy does not refuse was accepted as an allowance")
	}
}

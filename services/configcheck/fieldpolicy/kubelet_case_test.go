package fieldpolicy

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	_ "k8s.io/kubernetes/pkg/features" // registers the gates the kubelet's defaulting reads
	"k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"
	"sigs.k8s.io/yaml"
)

// kubeletMerge reads dropIn over the kubelet's defaults the way the kubelet
// reads a drop-in (k8s.io/kubernetes cmd/kubelet/app/server.go,
// mergeKubeletConfigurations): decoded into JSON as written, with the
// kubelet's own codec (no struct, so no unknown-field check), merged as a
// JSON merge patch, then decoded with encoding/json, which folds case.
// Only the test links the kubelet's code: the reconciler runs Check and
// does not link it.
func kubeletMerge(t *testing.T, dropIn []byte) *kubeletv1beta1.KubeletConfiguration {
	t.Helper()
	s, codecs, err := scheme.NewSchemeAndCodecs()
	if err != nil {
		t.Fatal(err)
	}
	defaults := &kubeletv1beta1.KubeletConfiguration{}
	s.Default(defaults)
	base, err := json.Marshal(defaults)
	if err != nil {
		t.Fatal(err)
	}
	patch, _, err := codec.DecodeKubeletConfigurationIntoJSON(codecs, dropIn)
	if err != nil {
		t.Fatalf("the kubelet refuses the drop-in: %v", err)
	}
	merged, err := jsonpatch.MergePatch(base, patch)
	if err != nil {
		t.Fatal(err)
	}
	var config kubeletv1beta1.KubeletConfiguration
	if err := json.Unmarshal(merged, &config); err != nil {
		t.Fatalf("the kubelet refuses the merged configuration: %v", err)
	}
	return &config
}

// The kubelet honours a drop-in key that differs from a field's name in
// case, and Check refuses it.
func TestKubeletHonoursCaseVariantsInDropInsAndCheckRefusesThem(t *testing.T) {
	tests := []struct {
		name     string
		dropIn   string
		honoured func(*kubeletv1beta1.KubeletConfiguration) bool
		refused  string
	}{
		{
			name:     "capitalised",
			dropIn:   "ReadOnlyPort: 10255\n",
			honoured: func(c *kubeletv1beta1.KubeletConfiguration) bool { return c.ReadOnlyPort == 10255 },
			refused:  "readOnlyPort",
		},
		{
			name:     "lower case",
			dropIn:   "readonlyport: 10255\n",
			honoured: func(c *kubeletv1beta1.KubeletConfiguration) bool { return c.ReadOnlyPort == 10255 },
			refused:  "readOnlyPort",
		},
		{
			name:     "long s folds to s",
			dropIn:   "ſtaticPodPath: /attacker\n",
			honoured: func(c *kubeletv1beta1.KubeletConfiguration) bool { return c.StaticPodPath == "/attacker" },
			refused:  "staticPodPath",
		},
		{
			name:     "kelvin sign folds to k",
			dropIn:   "tlsPrivate\u212aeyFile: /attacker.key\n",
			honoured: func(c *kubeletv1beta1.KubeletConfiguration) bool { return c.TLSPrivateKeyFile == "/attacker.key" },
			refused:  "tlsPrivateKeyFile",
		},
		{
			name:   "nested, lower case",
			dropIn: "authentication: {x509: {clientcafile: /attacker-ca.crt}}\n",
			honoured: func(c *kubeletv1beta1.KubeletConfiguration) bool {
				return c.Authentication.X509.ClientCAFile == "/attacker-ca.crt"
			},
			refused: "authentication",
		},
		{
			// The defaults set anonymous.enabled: false, yet "anonymouſ"
			// sorts after "anonymous" in the merged JSON and so is decoded
			// last, over it.
			name:   "nested, over a default",
			dropIn: "authentication: {anonymouſ: {enabled: true}}\n",
			honoured: func(c *kubeletv1beta1.KubeletConfiguration) bool {
				return c.Authentication.Anonymous.Enabled != nil && *c.Authentication.Anonymous.Enabled
			},
			refused: "authentication",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dropIn := []byte(header + tt.dropIn)
			if !tt.honoured(kubeletMerge(t, dropIn)) {
				t.Errorf("the kubelet does not honour %q", tt.dropIn)
			}
			got := refusedPathsOf(t, Policy{}.Check(dropIn))
			if len(got) != 1 || got[0] != tt.refused {
				t.Errorf("Check refused %v, want [%s]", got, tt.refused)
			}
		})
	}
}

// The kubelet's --config file is decoded differently, case-sensitively
// (strict, then lenient: both sigs.k8s.io/json's case-sensitive decoding),
// and there a case variant is ignored. Drop-ins are what a NodeConfig
// writes, hence Check folds case.
func TestKubeletIgnoresCaseVariantsInItsConfigFile(t *testing.T) {
	_, codecs, err := scheme.NewSchemeAndCodecs()
	if err != nil {
		t.Fatal(err)
	}
	config, err := codec.DecodeKubeletConfiguration(context.Background(), codecs, []byte(header+"ReadOnlyPort: 10255\n"))
	if err != nil {
		t.Fatal(err)
	}
	if config.ReadOnlyPort != 0 {
		t.Errorf("readOnlyPort = %d from a --config file, want the variant ignored", config.ReadOnlyPort)
	}
}

// The kubelet reads a drop-in that looks like JSON as JSON, so one the YAML
// parser refuses still sets its fields: Check reads it as JSON too.
func TestKubeletReadsJSONTheYAMLParserRefuses(t *testing.T) {
	if _, err := yaml.YAMLToJSON([]byte(jsonYAMLRefuses)); err == nil {
		t.Fatalf("the YAML parser reads %s: pick another input", jsonYAMLRefuses)
	}
	if got := kubeletMerge(t, []byte(jsonYAMLRefuses)).ReadOnlyPort; got != 10255 {
		t.Errorf("readOnlyPort = %d, want the kubelet to read 10255", got)
	}
}

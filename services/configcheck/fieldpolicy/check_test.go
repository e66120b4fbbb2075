package fieldpolicy

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// jsonYAMLRefuses is a drop-in the kubelet reads (as JSON) and the YAML
// parser does not.
const jsonYAMLRefuses = `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "readOnlyPort": 10255, "note": "a\/b"}`

// refusedPathsOf is what Check refused, nil when it passed.
func refusedPathsOf(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("Check returned %T, not a *RefusedError: %v", err, err)
	}
	var paths []string
	for _, f := range refused.Fields {
		paths = append(paths, f.Path)
	}
	return paths
}

// nested is a drop-in setting the dotted path to value, as JSON.
func nested(t *testing.T, dotted string, value any) []byte {
	t.Helper()
	p := splitPath(dotted)
	for i := len(p) - 1; i >= 0; i-- {
		value = map[string]any{p[i]: value}
	}
	doc := value.(map[string]any)
	doc["apiVersion"] = "kubelet.config.k8s.io/v1beta1"
	doc["kind"] = "KubeletConfiguration"
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestEachRefusedFieldIsRefusedWithItsReason(t *testing.T) {
	for _, f := range Refused {
		t.Run(f.Path, func(t *testing.T) {
			err := Policy{}.Check(nested(t, f.Path, "attacker's value"))
			var refused *RefusedError
			if !errors.As(err, &refused) || !slices.Equal(refused.Fields, []Field{f}) {
				t.Fatalf("Check = %v, want a *RefusedError naming %s alone", err, f.Path)
			}
			if !strings.Contains(err.Error(), f.Path+" ("+f.Reason+")") {
				t.Errorf("the error does not give the reason: %v", err)
			}
		})
	}
}

// A field beneath a refused object is refused as that object.
func TestEachSubFieldIsRefusedAsItsObject(t *testing.T) {
	for _, s := range subFields {
		t.Run(s, func(t *testing.T) {
			got := refusedPathsOf(t, Policy{}.Check(nested(t, s, true)))
			if want := []string{splitPath(s)[0]}; !slices.Equal(got, want) {
				t.Errorf("Check refused %v, want %v", got, want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		dropIn  string
		refused []string
	}{
		{
			name: "ordinary tuning passes",
			dropIn: header + `maxPods: 250
evictionHard:
  memory.available: 200Mi
  nodefs.available: 10%
imageGCHighThresholdPercent: 80
imageGCLowThresholdPercent: 70
imageMaximumGCAge: 168h
kubeReserved: {cpu: 500m, memory: 1Gi}
systemReserved: {cpu: 250m}
featureGates:
  GracefulNodeShutdown: true
  InPlacePodVerticalScaling: true
logging:
  format: json
  verbosity: 4
cpuManagerPolicy: static
shutdownGracePeriod: 30s
containerLogMaxSize: 50Mi
serializeImagePulls: false
`,
		},
		{name: "an empty drop-in passes", dropIn: header},
		{
			// featureGates is a map, whose keys the kubelet reads as
			// written, and no gate is a kubelet field.
			name:   "a refused field's name as a feature gate passes",
			dropIn: header + "featureGates: {readOnlyPort: true}\n",
		},
		{
			// encoding/json matches no field to a key with a dot in it:
			// the kubelet ignores it.
			name:   "a dotted key is not a path",
			dropIn: header + "authorization.mode: AlwaysAllow\n",
		},

		// Setting a field at all is refused, whatever the value.
		{name: "zero port", dropIn: header + "readOnlyPort: 0\n", refused: []string{"readOnlyPort"}},
		{name: "false", dropIn: header + "enableDebuggingHandlers: false\n", refused: []string{"enableDebuggingHandlers"}},
		{name: "empty string", dropIn: header + `staticPodPath: ""` + "\n", refused: []string{"staticPodPath"}},
		{name: "empty list", dropIn: header + "clusterDNS: []\n", refused: []string{"clusterDNS"}},
		{name: "null field", dropIn: header + "tlsCertFile: null\n", refused: []string{"tlsCertFile"}},
		{name: "empty map field", dropIn: header + "staticPodURLHeader: {}\n", refused: []string{"staticPodURLHeader"}},
		{name: "null map field", dropIn: header + "staticPodURLHeader: null\n", refused: []string{"staticPodURLHeader"}},
		{name: "null object", dropIn: header + "authentication: null\n", refused: []string{"authentication"}},
		{name: "empty object", dropIn: header + "tracing: {}\n", refused: []string{"tracing"}},
		{name: "null nested object", dropIn: header + "authentication: {anonymous: null}\n", refused: []string{"authentication"}},
		{name: "empty nested object", dropIn: header + "authentication: {anonymous: {}}\n", refused: []string{"authentication"}},
		{name: "nested leaf", dropIn: header + "authentication:\n  anonymous:\n    enabled: true\n", refused: []string{"authentication"}},
		{
			// A field a later kubelet adds beneath a refused object is
			// refused with it.
			name:    "unknown field beneath a refused object",
			allowed: []string{"authentication.webhook"},
			dropIn:  header + "authentication: {someFutureMode: {enabled: true}}\n",
			refused: []string{"authentication"},
		},

		// What the operator allows passes, and nothing else.
		{name: "allowed field", allowed: []string{"readOnlyPort"}, dropIn: header + "readOnlyPort: 10255\n"},
		{
			name:    "allowed field beside a refused one",
			allowed: []string{"readOnlyPort"},
			dropIn:  header + "readOnlyPort: 10255\nstaticPodPath: /etc/kubernetes/manifests\n",
			refused: []string{"staticPodPath"},
		},
		{name: "beneath an allowed object", allowed: []string{"authorization"}, dropIn: header + "authorization: {mode: AlwaysAllow}\n"},
		{name: "allowed object set whole", allowed: []string{"authorization"}, dropIn: header + "authorization: null\n"},
		{
			name:    "beneath an allowed sub-field",
			allowed: []string{"authorization.webhook"},
			dropIn:  header + "authorization: {webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 10s}}\n",
		},
		{
			name:    "beside an allowed sub-field",
			allowed: []string{"authorization.webhook"},
			dropIn:  header + "authorization: {mode: AlwaysAllow, webhook: {cacheAuthorizedTTL: 1m}}\n",
			refused: []string{"authorization"},
		},
		{
			// null deletes the object, cacheUnauthorizedTTL and mode
			// with it.
			name:    "above an allowed sub-field",
			allowed: []string{"authorization.webhook.cacheAuthorizedTTL"},
			dropIn:  header + "authorization: {webhook: null}\n",
			refused: []string{"authorization"},
		},
		{
			name:    "allowed tracing rate",
			allowed: []string{"tracing.samplingRatePerMillion"},
			dropIn:  header + "tracing: {samplingRatePerMillion: 100}\n",
		},
		{
			name:    "tracing endpoint beside an allowed rate",
			allowed: []string{"tracing.samplingRatePerMillion"},
			dropIn:  header + "tracing: {samplingRatePerMillion: 100, endpoint: collector.attacker.example:4317}\n",
			refused: []string{"tracing"},
		},

		// Keys are matched as the kubelet reads a drop-in: under Unicode
		// case folding (see kubelet_case_test.go for the kubelet's side).
		{name: "capitalised", dropIn: header + "ReadOnlyPort: 10255\n", refused: []string{"readOnlyPort"}},
		{name: "lower case", dropIn: header + "readonlyport: 10255\n", refused: []string{"readOnlyPort"}},
		{name: "upper case", dropIn: header + "READONLYPORT: 10255\n", refused: []string{"readOnlyPort"}},
		{name: "long s", dropIn: header + "ſtaticPodPath: /attacker\n", refused: []string{"staticPodPath"}},
		{name: "kelvin sign", dropIn: header + "tlsPrivate\u212aeyFile: /attacker.key\n", refused: []string{"tlsPrivateKeyFile"}},
		{name: "case of an object", dropIn: header + "Authentication: {Anonymous: {Enabled: true}}\n", refused: []string{"authentication"}},
		{name: "long s in an object", dropIn: header + "authentication: {anonymouſ: {enabled: true}}\n", refused: []string{"authentication"}},
		{
			name:    "case variant of an allowed field",
			allowed: []string{"readOnlyPort"},
			dropIn:  header + "ReadOnlyPort: 10255\n",
		},
		{
			name:    "case variant beneath an allowed sub-field",
			allowed: []string{"authorization.webhook"},
			dropIn:  header + "Authorization: {WEBHOOK: {cacheAuthorizedTTL: 1m}}\n",
		},
		{
			name:    "exact and variant keys together",
			dropIn:  header + "readOnlyPort: 0\nReadOnlyPort: 10255\n",
			refused: []string{"readOnlyPort"},
		},

		// Every way of writing the drop-in is read.
		{name: "JSON", dropIn: `{"kind":"KubeletConfiguration","readOnlyPort":10255}`, refused: []string{"readOnlyPort"}},
		{
			// The YAML parser refuses the "\/" escape: the JSON view
			// still sees the field.
			name:    "JSON the YAML parser refuses",
			dropIn:  jsonYAMLRefuses,
			refused: []string{"readOnlyPort"},
		},
		{
			name:    "a number too large for a float",
			dropIn:  `{"maxPods": 1e999, "readOnlyPort": 10255}`,
			refused: []string{"readOnlyPort"},
		},
		{
			name:    "YAML merge key",
			dropIn:  header + "defaults: &defaults {readOnlyPort: 10255}\n<<: *defaults\n",
			refused: []string{"readOnlyPort"},
		},
		{
			name:    "in Refused's order",
			dropIn:  header + "staticPodPath: /x\nreadOnlyPort: 1\nauthorization: {mode: AlwaysAllow}\nclusterDNS: [10.0.0.10]\n",
			refused: []string{"authorization", "clusterDNS", "readOnlyPort", "staticPodPath"},
		},

		// What is no mapping is the validator's to judge.
		{name: "not YAML", dropIn: "readOnlyPort: [10255\n"},
		{name: "a list", dropIn: "- readOnlyPort: 10255\n"},
		{name: "a scalar", dropIn: "readOnlyPort"},
		{name: "nothing", dropIn: ""},
		{name: "null", dropIn: "null"},
		{name: "binary", dropIn: "\x00\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy, err := ParseAllowed(tt.allowed)
			if err != nil {
				t.Fatal(err)
			}
			got := refusedPathsOf(t, policy.Check([]byte(tt.dropIn)))
			if !slices.Equal(got, tt.refused) {
				t.Errorf("Check refused %v, want %v", got, tt.refused)
			}
		})
	}
}

func TestRefusedErrorNamesEachFieldAndItsReason(t *testing.T) {
	err := Policy{}.Check([]byte(header + "readOnlyPort: 10255\nauthorization: {mode: AlwaysAllow}\n"))
	want := "the field policy refuses authorization (decides what a kubelet API caller may do: AlwaysAllow grants any caller every kubelet API, exec into pods included)" +
		" and readOnlyPort (opens an unauthenticated port that serves every pod's spec, environment included, and the node's metrics)" +
		"; an operator may allow a field with --allow-kubelet-fields"
	if err == nil || err.Error() != want {
		t.Errorf("Check =\n  %v\nwant\n  %s", err, want)
	}

	three := (&RefusedError{Fields: []Field{{"a", "x"}, {"b", "y"}, {"c", "z"}}}).Error()
	if !strings.HasPrefix(three, "the field policy refuses a (x), b (y) and c (z);") {
		t.Errorf("three fields read %q", three)
	}
}

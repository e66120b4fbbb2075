package disruption

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"nodeconfig.io/services/configcheck/kubeletcheck"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// effective is the kubelet's configuration on a node whose base config is
// base, with dropIn as nodeconfig's drop-in (nil: none).
func effective(t *testing.T, base string, dropIn []byte) *kubeletcheck.Effective {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(header+"failCgroupV1: false\n"+base), 0o644); err != nil {
		t.Fatal(err)
	}
	n := kubeletcheck.NodeFiles{BaseConfig: filepath.Join(dir, "config.yaml"), DropInDir: conf, Own: filepath.Join(conf, "50-nodeconfig.conf")}
	eff, err := n.Effective(context.Background(), dropIn)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

func dropIn(body string) []byte { return []byte(header + body) }

func TestPlanByField(t *testing.T) {
	for _, tc := range []struct {
		name           string
		base           string
		before, after  []byte
		fields, remove []string
		drain          []string
		refused        []string
	}{
		{name: "a restart alone", before: dropIn("maxPods: 60\n"), after: dropIn("maxPods: 61\n"), fields: []string{"maxPods"}},
		{name: "nothing the kubelet runs changes", before: dropIn("maxPods: 60\n"), after: []byte("# the same\nmaxPods: 60\n" + header), fields: nil},
		{name: "the base config said it already", base: "maxPods: 60\n", before: nil, after: dropIn("maxPods: 60\n"), fields: nil},
		{
			name: "none to static with its reservation", before: nil, after: dropIn("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"),
			fields: []string{"cpuManagerPolicy", "reservedSystemCPUs"}, remove: []string{CPUManagerState}, drain: []string{"cpuManagerPolicy", "reservedSystemCPUs"},
		},
		{
			name: "and back, as a rollback goes", before: dropIn("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"), after: nil,
			fields: []string{"cpuManagerPolicy", "reservedSystemCPUs"}, remove: []string{CPUManagerState}, drain: []string{"cpuManagerPolicy", "reservedSystemCPUs"},
		},
		{
			name: "reserved CPUs under static", base: "cpuManagerPolicy: static\n", before: dropIn("kubeReserved: {cpu: 500m}\n"), after: dropIn("kubeReserved: {cpu: \"1\", memory: 1Gi}\n"),
			fields: []string{"kubeReserved.cpu", "kubeReserved.memory"}, remove: []string{CPUManagerState}, drain: []string{"kubeReserved.cpu"},
		},
		{
			name: "reserved CPUs under none are a restart", before: dropIn("kubeReserved: {cpu: 500m}\n"), after: dropIn("kubeReserved: {cpu: \"1\"}\n"),
			fields: []string{"kubeReserved.cpu"},
		},
		{
			name: "a policy option under static", base: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n", before: nil, after: dropIn("cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n"),
			fields: []string{"cpuManagerPolicyOptions.full-pcpus-only"}, remove: []string{CPUManagerState}, drain: []string{"cpuManagerPolicyOptions.full-pcpus-only"},
		},
		{
			name: "the memory manager", before: nil, after: dropIn("memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 150Mi}}]\nkubeReserved: {memory: 50Mi}\nevictionHard: {memory.available: 100Mi}\n"),
			fields: []string{"evictionHard.memory.available", "kubeReserved.memory", "memoryManagerPolicy", "reservedMemory"}, remove: []string{MemoryManagerState},
			drain: []string{"memoryManagerPolicy", "reservedMemory"},
		},
		{name: "the topology manager", before: nil, after: dropIn("topologyManagerScope: pod\n"), fields: []string{"topologyManagerScope"}, drain: []string{"topologyManagerScope"}},
		{name: "the cgroup layout", before: nil, after: dropIn("cgroupRoot: /elsewhere\n"), fields: []string{"cgroupRoot"}, refused: []string{"cgroupRoot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := For(effective(t, tc.base, tc.before), effective(t, tc.base, tc.after))
			if err != nil {
				t.Fatal(err)
			}
			var refused []string
			for _, r := range p.Refused {
				refused = append(refused, r.Field)
			}
			if !slices.Equal(p.Fields, tc.fields) || !slices.Equal(p.Remove, tc.remove) || !slices.Equal(p.Drain, tc.drain) || !slices.Equal(refused, tc.refused) {
				t.Fatalf("plan: fields %q remove %q drain %q refused %q\nwant fields %q remove %q drain %q refused %q",
					p.Fields, p.Remove, p.Drain, refused, tc.fields, tc.remove, tc.drain, tc.refused)
			}
			if got := p.Restart(); got != (len(tc.fields) > 0) {
				t.Fatalf("Restart() = %v with fields %q", got, p.Fields)
			}
			if err := p.RefusedError(); (err != nil) != (len(tc.refused) > 0) || (err != nil && !strings.Contains(err.Error(), "cgroupRoot (")) {
				t.Fatalf("RefusedError() = %v", err)
			}
		})
	}
}

// Every rule names a field the kubelet has (its top-level JSON name), so
// that a rename upstream fails here rather than matching nothing.
func TestRulesNameKubeletFields(t *testing.T) {
	typ := reflect.TypeOf(kubeletv1beta1.KubeletConfiguration{})
	names := map[string]bool{}
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	for _, r := range Rules {
		top, _, _ := strings.Cut(r.Field, ".")
		if !names[top] {
			t.Errorf("rule %s: the kubelet's configuration has no field %s", r.Field, top)
		}
		if r.Why == "" || (!r.Drain && !r.Refuse && len(r.Remove) == 0) {
			t.Errorf("rule %s says neither why nor what it needs", r.Field)
		}
	}
}

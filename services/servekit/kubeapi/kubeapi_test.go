package kubeapi

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigCarriesTheFlagsLimitAndUserAgent(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	f.Register(fs, 500, 1000, "why")
	if err := fs.Parse([]string{"--kubeconfig", writeKubeconfig(t), "--kube-api-qps", "250", "--kube-api-burst", "300"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config("nodeconfig-test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.QPS != 250 || cfg.Burst != 300 || cfg.UserAgent != "nodeconfig-test" {
		t.Fatalf("config: host %q, QPS %v, burst %d, user agent %q", cfg.Host, cfg.QPS, cfg.Burst, cfg.UserAgent)
	}
}

func TestRegisterSetsTheServicesDefaults(t *testing.T) {
	var f Flags
	f.Register(flag.NewFlagSet("svc", flag.ContinueOnError), 500, 1000, "why")
	if f.QPS != 500 || f.Burst != 1000 || f.Kubeconfig != "" {
		t.Fatalf("defaults: %+v", f)
	}
}

// A zero would become client-go's 5 a second and a burst of zero would
// never let a request through: both are refused, saying which flag.
func TestConfigRefusesALimitThatCannotBeMeant(t *testing.T) {
	path := writeKubeconfig(t)
	for _, c := range []struct {
		f    Flags
		want string
	}{
		{Flags{Kubeconfig: path, QPS: 0, Burst: 10}, "--kube-api-qps 0"},
		{Flags{Kubeconfig: path, QPS: -1, Burst: 10}, "--kube-api-qps -1"},
		{Flags{Kubeconfig: path, QPS: math.NaN(), Burst: 10}, "--kube-api-qps NaN"},
		{Flags{Kubeconfig: path, QPS: 5, Burst: 0}, "--kube-api-burst 0"},
		{Flags{Kubeconfig: filepath.Join(t.TempDir(), "missing"), QPS: 5, Burst: 10}, "missing"},
	} {
		_, err := c.f.Config("x")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.f, err, c.want)
		}
	}
}

package integration

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// Each service binary, started as a process on a free port and a unix
// socket, answers grpc.health.v1 and reflection (as grpcurl shows them) and
// exits cleanly on SIGTERM.
func TestServiceBinariesServeHealthReflectionAndStopOnSIGTERM(t *testing.T) {
	grpcurl, err := proc.Binary("grpcurl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := cluster.Shared.Kubeconfig
	for _, tc := range []struct {
		name    string
		service string
		args    []string
	}{
		{"checkpointd", "nodeconfig.v1.CheckpointService", []string{"--state-dir", filepath.Join(dir, "state"), "--target-dir", filepath.Join(dir, "target")}},
		{"statusd", "nodeconfig.v1.StatusService", []string{"--kubeconfig", kubeconfig, "--node-name", "svc-test", "--state-file", filepath.Join(dir, "reports.json"), "--admission-policy="}},
		{"reconciler", "nodeconfig.v1.ReconcilerService", []string{"--kubeconfig", kubeconfig, "--leader-elect=false", "--agent-socket-template", filepath.Join(dir, "{node}.sock"), "--admission-policy="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := proc.Binary(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			addr, err := proc.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			metrics, err := proc.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			socket := filepath.Join(dir, tc.name+".sock")
			args := append([]string{"--listen", addr, "--socket", socket, "--metrics-addr", metrics}, tc.args...)
			p, err := proc.Start(tc.name, bin, args, filepath.Join(dir, tc.name+".log"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Kill() })
			if err := sim.WaitServing(addr, 20*time.Second); err != nil {
				t.Fatalf("%v\n%s", err, p.Tail(2000))
			}
			for _, target := range [][]string{{"-plaintext", addr}, {"-plaintext", "-unix", socket}} {
				list := run(t, grpcurl, append(target, "list")...)
				for _, want := range []string{tc.service, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
					if !strings.Contains(list, want) {
						t.Fatalf("grpcurl %v list = %q, missing %s", target, list, want)
					}
				}
				health := run(t, grpcurl, append(target, "grpc.health.v1.Health/Check")...)
				if !strings.Contains(health, `"SERVING"`) {
					t.Fatalf("health check over %v = %q", target, health)
				}
			}
			if out := httpGet(t, "http://"+metrics+"/metrics"); !strings.Contains(out, "go_goroutines") {
				t.Fatalf("/metrics does not look like Prometheus metrics: %.200s", out)
			}
			if out := httpGet(t, "http://"+metrics+"/healthz"); out != "ok\n" {
				t.Fatalf("/healthz = %q", out)
			}
			if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
				if err := p.ExitError(); err != nil {
					t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Tail(2000))
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%s did not exit within 15s of SIGTERM", tc.name)
			}
		})
	}
}

// --help lists the flags with their defaults and exits 0.
func TestServiceBinariesHelp(t *testing.T) {
	for _, name := range []string{"checkpointd", "statusd", "reconciler"} {
		bin, err := proc.Binary(name)
		if err != nil {
			t.Fatal(err)
		}
		out := run(t, bin, "--help")
		for _, want := range []string{"-listen", "-socket", "-metrics-addr", "(default "} {
			if !strings.Contains(out, want) {
				t.Fatalf("%s --help lacks %q:\n%s", name, want, out)
			}
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A service never serves unauthenticated callers from other hosts, and
// never sends or accepts tokens in clear text: such flags stop it at once
// with a message that says what to set.
func TestServicesRefuseInsecureListenFlags(t *testing.T) {
	dir, err := os.MkdirTemp("", "nc-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, tc := range []struct {
		service string
		args    []string
		want    string
	}{
		{"checkpointd", []string{"--listen", "0.0.0.0:0"}, "reachable from other hosts"},
		{"statusd", []string{"--listen", "[::]:0", "--node-name", "n"}, "reachable from other hosts"},
		{"checkpointd", []string{"--listen", "127.0.0.1:0", "--auth=token", "--kubeconfig", cluster.Shared.Kubeconfig}, "needs --tls-cert-file"},
		{"checkpointd", []string{"--auth=maybe"}, `--auth "maybe"`},
		{"reconciler", []string{"--agent-token-audience", "nodeconfig-agent/{node}", "--agent-token-service-account", "ns/r"}, "need --agent-ca-file"},
		{"reconciler", []string{"--agent-ca-file", "/dev/null", "--agent-token-audience", "nodeconfig-agent", "--agent-token-service-account", "ns/r"}, "must contain {node}"},
		{"reconciler", []string{"--agent-token-audience", "nodeconfig-agent/{node}"}, "want NAMESPACE/NAME"},
		// Without the policy that confines it, a service does not start.
		{"statusd", []string{"--listen", "127.0.0.1:0", "--node-name", "n", "--admission-policy", "nodeconfig-no-such"}, "ValidatingAdmissionPolicy nodeconfig-no-such is missing"},
		{"reconciler", []string{"--listen", "127.0.0.1:0", "--leader-elect=false", "--admission-policy", "nodeconfig-no-such"}, "ValidatingAdmissionPolicy nodeconfig-no-such is missing"},
	} {
		bin, err := proc.Binary(tc.service)
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--metrics-addr", "", "--state-dir", filepath.Join(dir, "state"), "--target-dir", filepath.Join(dir, "target")}, tc.args...)
		if tc.service != "checkpointd" {
			args = append([]string{"--metrics-addr", "", "--kubeconfig", cluster.Shared.Kubeconfig}, tc.args...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %v: err %v, output %q; want a failure saying %q", tc.service, tc.args, err, out, tc.want)
		}
	}
}

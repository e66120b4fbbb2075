package kubeletcheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// Each drop-in the kubelet refuses at start, with the words it refuses it in.
func TestCheckRefusesWhatTheKubeletRefuses(t *testing.T) {
	for _, c := range []struct{ dropIn, want string }{
		{"hairpinMode: bogus", `option "bogus" specified for hairpinMode`},
		{"topologyManagerPolicy: bogus", `topologyManagerPolicy (--topology-manager-policy) "bogus" must be one of`},
		{"oomScoreAdj: 5000", "oomScoreAdj (--oom-score-adj) 5000 must be between -1000 and 1000"},
		{"nodeLeaseDurationSeconds: -5", "nodeLeaseDurationSeconds must be greater than 0"},
		{"registryPullQPS: -1", "registryPullQPS (--registry-qps) -1 must not be a negative number"},
		{"readOnlyPort: 99999", "readOnlyPort (--read-only-port) 99999 must be between 0 and 65535"},
		{"containerLogMaxFiles: 1", "containerLogMaxFiles must be greater than 1"},
		{"podLogsDir: relative/path", `pod logs path "relative/path" must be absolute path`},
		{"evictionHard:\n  memory.available: banana", `evictionHard[memory.available]: "banana"`},
		{"evictionHard:\n  no.such.signal: 1Gi", "unsupported eviction signal no.such.signal"},
		{"featureGates:\n  NoSuchGate: true", "unrecognized feature gate: NoSuchGate"},
		{"clusterDNS: [not-an-ip]", `clusterDNS[0] "not-an-ip" is not an IP address`},
		{"maxPods: abc", "cannot unmarshal"},
		{"logging:\n  format: nosuchformat", "logging.format"},
		{"apiVersion: v1\nkind: ConfigMap", "unknown apiVersion/kind"},
	} {
		t.Run(strings.ReplaceAll(c.dropIn, "\n", " "), func(t *testing.T) {
			dropIn := header + c.dropIn
			if strings.HasPrefix(c.dropIn, "apiVersion") {
				dropIn = c.dropIn
			}
			err := Check(context.Background(), []byte(dropIn))
			if err == nil {
				t.Fatalf("accepted:\n%s", dropIn)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refused with %q, want it to say %q", err, c.want)
			}
		})
	}
}

func TestCheckAcceptsAGoodDropInAndAFieldNewerThanOurTypes(t *testing.T) {
	for _, dropIn := range []string{
		"maxPods: 57\nevictionHard:\n  memory.available: 5%\nclusterDNS: [10.0.0.10]",
		// The kubelet only warns about a field it does not know; so must we.
		"maxPods: 57\nsomeFieldFromAFutureKubelet: true",
		"featureGates:\n  GracefulNodeShutdown: true",
	} {
		if err := Check(context.Background(), []byte(header+dropIn)); err != nil {
			t.Errorf("refused %q: %v", dropIn, err)
		}
	}
}

// A drop-in valid alone can be invalid merged with the node's files: the
// kubelet merges them all before it validates.
func TestEffectiveMergesTheNodesFilesInTheKubeletsOrder(t *testing.T) {
	dir := t.TempDir()
	confDir := filepath.Join(dir, "kubelet.conf.d")
	write(t, filepath.Join(dir, "config.yaml"), header+"failCgroupV1: false\nmaxPods: 110\nstaticPodPath: manifests\nevictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n")
	write(t, filepath.Join(confDir, "10-site.conf"), header+"maxPods: 80\nreadOnlyPort: 0\n")
	write(t, filepath.Join(confDir, "90-last.conf"), header+"serializeImagePulls: false\n")
	write(t, filepath.Join(confDir, "README"), "not a drop-in: no .conf ending")
	write(t, filepath.Join(confDir, "50-nodeconfig.conf"), header+"maxPods: 1\n") // replaced by the candidate
	node := NodeFiles{BaseConfig: filepath.Join(dir, "config.yaml"), DropInDir: confDir, Own: filepath.Join(confDir, "50-nodeconfig.conf")}

	eff, err := node.Effective(context.Background(), []byte(header+"maxPods: 57\nserializeImagePulls: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if eff.Config.MaxPods != 57 {
		t.Errorf("maxPods %d, want 57 (the candidate comes after 10-site.conf)", eff.Config.MaxPods)
	}
	if eff.Config.SerializeImagePulls {
		t.Error("serializeImagePulls true, want false (90-last.conf comes after the candidate)")
	}
	if want := filepath.Join(dir, "manifests"); eff.Config.StaticPodPath != want {
		t.Errorf("staticPodPath %q, want %q (relative to the config file)", eff.Config.StaticPodPath, want)
	}
	wantFiles := []string{node.BaseConfig, filepath.Join(confDir, "10-site.conf"), node.Own, filepath.Join(confDir, "90-last.conf")}
	if strings.Join(eff.Files, " ") != strings.Join(wantFiles, " ") {
		t.Errorf("merged %v, want %v", eff.Files, wantFiles)
	}
	yaml, err := eff.YAML()
	if err != nil || !strings.Contains(string(yaml), "maxPods: 57") {
		t.Errorf("YAML %v:\n%s", err, yaml)
	}

	without, err := node.Effective(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if without.Config.MaxPods != 80 {
		t.Errorf("without the candidate maxPods %d, want 80 from 10-site.conf", without.Config.MaxPods)
	}

	// Valid alone, refused merged: the base's soft threshold keeps its
	// grace period only until a drop-in clears it.
	bad := []byte(header + "evictionSoftGracePeriod: null\n")
	if err := Check(context.Background(), bad); err != nil {
		t.Fatalf("alone it is valid: %v", err)
	}
	if _, err := node.Effective(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "grace period must be specified") {
		t.Fatalf("merged with the node's base config: %v, want the missing grace period", err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFingerprintFollowsTheNodesOwnFilesOnly(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "config.yaml")
	dropIns := filepath.Join(dir, "conf.d")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(base, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	n := NodeFiles{BaseConfig: base, DropInDir: dropIns, Own: filepath.Join(dropIns, "50-nodeconfig.conf")}
	fingerprint := func() string {
		t.Helper()
		fp, err := n.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	first := fingerprint()
	write(n.Own, "ours")
	if got := fingerprint(); got != first {
		t.Fatal("our own drop-in changed the fingerprint")
	}
	write(filepath.Join(dropIns, "10-site.conf"), "x")
	withSite := fingerprint()
	if withSite == first {
		t.Fatal("a new site drop-in left the fingerprint as it was")
	}
	write(base, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 9\n")
	if fingerprint() == withSite {
		t.Fatal("a changed base left the fingerprint as it was")
	}
	if err := os.Remove(base); err != nil {
		t.Fatal(err)
	}
	var nodeFiles *NodeFilesError
	if _, err := n.Fingerprint(); !errors.As(err, &nodeFiles) {
		t.Fatalf("base gone: %v, want a NodeFilesError", err)
	}
}

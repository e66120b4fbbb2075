// Package images checks the OCI tarballs 'make images' builds.
package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/test/framework/proc"
)

// Each image loads, runs its binary as a non-root user, is tagged as
// deploy/kustomization.yaml references it, and its binary answers --help.
// The reconciler's also holds its kubelet validator next to its binary,
// where the reconciler looks for it by default, and the validator judges.
func TestImagesAreLoadableNonRootAndRun(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := proc.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	var kustomization struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kustomization); err != nil {
		t.Fatal(err)
	}
	if len(kustomization.Images) != 3 {
		t.Fatalf("kustomization names %d images, want 3", len(kustomization.Images))
	}
	for _, want := range kustomization.Images {
		service := strings.TrimPrefix(want.Name, "nodeconfig/")
		t.Run(service, func(t *testing.T) {
			path := filepath.Join(bin, "images", service+".tar")
			tag, err := name.NewTag(want.NewName + ":" + want.NewTag)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatalf("%s (run 'make images'): %v", path, err)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != "/service" {
				t.Fatalf("entrypoint %v", got)
			}
			if cfg.Config.User != "65532:65532" || cfg.OS != "linux" {
				t.Fatalf("user %q os %q", cfg.Config.User, cfg.OS)
			}
			// Take the binaries out of the image's filesystem and run them.
			tr := tar.NewReader(mutate.Extract(img))
			dir := t.TempDir()
			files := map[string]bool{}
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				name := strings.TrimPrefix(h.Name, "/")
				if h.Typeflag != tar.TypeReg || strings.Contains(name, "/") {
					continue
				}
				if h.Mode&0o005 != 0o005 {
					t.Fatalf("/%s has mode %o: the image's user cannot run it", name, h.Mode)
				}
				f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o755)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(f, tr); err != nil {
					t.Fatal(err)
				}
				f.Close()
				files[name] = true
			}
			want := map[string]bool{"service": true}
			switch service {
			case "reconciler":
				want["nodeconfig-kubelet-check"] = true
			case "checkpointd":
				// The kubelet's start guard, which the agent installs on
				// the host.
				want["nodeconfig-guard"] = true
			}
			for name := range want {
				if !files[name] {
					t.Fatalf("no /%s in the image (it has %v)", name, files)
				}
			}
			for name := range files {
				if !want[name] {
					t.Fatalf("/%s in the image, which wants only %v", name, want)
				}
			}
			if want["nodeconfig-guard"] {
				out, _ := exec.Command(filepath.Join(dir, "nodeconfig-guard"), "--help").CombinedOutput()
				if !strings.Contains(string(out), "usage: nodeconfig-guard") {
					t.Fatalf("nodeconfig-guard --help:\n%s", out)
				}
			}
			out, err := exec.Command(filepath.Join(dir, "service"), "--help").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "-listen") {
				t.Fatalf("%s --help: %v\n%s", service, err, out)
			}
			if service == "reconciler" {
				if !strings.Contains(string(out), "-kubelet-check-binary") {
					t.Fatalf("reconciler --help has no --kubelet-check-binary:\n%s", out)
				}
				checkKubeletValidator(t, filepath.Join(dir, "nodeconfig-kubelet-check"))
			}
		})
	}
}

// checkKubeletValidator runs the validator of an image on a valid and an
// invalid drop-in: exit 0, then exit 1 with the kubelet's words.
func checkKubeletValidator(t *testing.T, exe string) {
	t.Helper()
	const valid = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n"
	cmd := exec.Command(exe)
	cmd.Stdin = strings.NewReader(valid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the image's kubelet validator on a valid drop-in: %v\n%s", err, out)
	}
	cmd = exec.Command(exe)
	cmd.Stdin = strings.NewReader(valid + "hairpinMode: bogus\n")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "hairpinMode") {
		t.Fatalf("the image's kubelet validator on hairpinMode: bogus: %v, stdout %q; want exit 1 naming hairpinMode", err, out)
	}
}

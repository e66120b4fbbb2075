// Package images checks the OCI tarballs 'make images' builds.
package images

import (
	"archive/tar"
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

	"nodeconfig.io/test/proc"
)

// Each image loads, runs its binary as a non-root user, is tagged as
// deploy/kustomization.yaml references it, and its binary answers --help.
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
			// Take the binary out of the image's filesystem and run it.
			tr := tar.NewReader(mutate.Extract(img))
			exe := filepath.Join(t.TempDir(), service)
			found := false
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Name == "service" || h.Name == "/service" {
					f, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := io.Copy(f, tr); err != nil {
						t.Fatal(err)
					}
					f.Close()
					found = true
				}
			}
			if !found {
				t.Fatal("no /service in the image")
			}
			out, err := exec.Command(exe, "--help").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "-listen") {
				t.Fatalf("%s --help: %v\n%s", service, err, out)
			}
		})
	}
}

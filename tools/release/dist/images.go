// Package dist assembles a release's files beside its images' OCI archives
// (install.yaml naming the images by digest, the Helm chart's package, the
// kubectl plugin's archives and krew manifest, SHA256SUMS) and verifies a
// release directory: the files it must hold, their sums, and that every
// file names the others' digests and platforms truly.
package dist

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"debug/macho"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Image is one service's OCI archive.
type Image struct {
	Service string // checkpointd
	Name    string // registry/checkpointd:version, as the archive names it
	Digest  string // the index's, sha256:...
	File    string // its file name in the release
	// Platforms are the index's, os/arch, sorted.
	Platforms []string
}

// Ref is the image by digest: registry/service@sha256:...
func (i Image) Ref() string { return repository(i.Name) + "@" + i.Digest }

// repository is an image name without its tag.
func repository(name string) string {
	if at := strings.LastIndex(name, ":"); at > strings.LastIndex(name, "/") {
		return name[:at]
	}
	return name
}

// Suffix is an image archive's file name's end.
const Suffix = ".oci.tar"

// ReadImages reads every OCI archive of dir. With deep, it also opens each
// platform's image and checks that its config and its entrypoint binary are
// that platform's.
func ReadImages(dir string, deep bool) ([]Image, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*"+Suffix))
	if err != nil {
		return nil, err
	}
	sort.Strings(matches)
	var images []Image
	for _, m := range matches {
		img, err := readImage(m, deep)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(m), err)
		}
		images = append(images, img)
	}
	return images, nil
}

func readImage(archive string, deep bool) (Image, error) {
	tmp, err := os.MkdirTemp("", "dist-oci-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(tmp)
	if err := untar(archive, tmp); err != nil {
		return Image{}, err
	}
	root, err := layout.ImageIndexFromPath(tmp)
	if err != nil {
		return Image{}, err
	}
	top, err := root.IndexManifest()
	if err != nil {
		return Image{}, err
	}
	if len(top.Manifests) != 1 {
		return Image{}, fmt.Errorf("index.json names %d entries, want one image index", len(top.Manifests))
	}
	d := top.Manifests[0]
	img := Image{Name: d.Annotations["io.containerd.image.name"], Digest: d.Digest.String(), File: filepath.Base(archive)}
	repo := repository(img.Name)
	img.Service = repo[strings.LastIndex(repo, "/")+1:]
	idx, err := root.ImageIndex(d.Digest)
	if err != nil {
		return Image{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return Image{}, err
	}
	for _, m := range im.Manifests {
		if m.Platform == nil {
			return Image{}, fmt.Errorf("manifest %s names no platform", m.Digest)
		}
		p := m.Platform.OS + "/" + m.Platform.Architecture
		img.Platforms = append(img.Platforms, p)
		if !deep {
			continue
		}
		one, err := idx.Image(m.Digest)
		if err != nil {
			return Image{}, err
		}
		if err := checkImage(one, p); err != nil {
			return Image{}, fmt.Errorf("%s: %w", p, err)
		}
	}
	sort.Strings(img.Platforms)
	return img, nil
}

// checkImage: the config says platform, and /service is an executable of
// it (its ELF header's machine, read from the layer itself).
func checkImage(img v1.Image, platform string) error {
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if got := cfg.OS + "/" + cfg.Architecture; got != platform {
		return fmt.Errorf("config says %s", got)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		head, found, err := fileHead(rc, "service")
		rc.Close()
		if err != nil {
			return err
		}
		if found {
			return checkExecutable(head, platform)
		}
	}
	return fmt.Errorf("no /service in its layers")
}

// fileHead reads the first bytes of the file name in a tar stream.
func fileHead(r io.Reader, name string) ([]byte, bool, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			head := make([]byte, 64)
			n, err := io.ReadFull(tr, head)
			if err != nil && err != io.ErrUnexpectedEOF {
				return nil, false, err
			}
			return head[:n], true, nil
		}
	}
}

// checkExecutable: head opens an executable for platform: an ELF file of
// its machine for linux, a Mach-O file of its CPU for darwin.
func checkExecutable(head []byte, platform string) error {
	want := map[string]uint32{
		"linux/amd64": uint32(elf.EM_X86_64), "linux/arm64": uint32(elf.EM_AARCH64),
		"darwin/amd64": uint32(macho.CpuAmd64), "darwin/arm64": uint32(macho.CpuArm64),
	}[platform]
	if len(head) < 20 {
		return fmt.Errorf("%d bytes is no executable", len(head))
	}
	switch {
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)) && strings.HasPrefix(platform, "linux/"):
		if got := uint32(binary.LittleEndian.Uint16(head[18:20])); got != want {
			return fmt.Errorf("an ELF executable for machine %v, not %s", elf.Machine(got), platform)
		}
	case binary.LittleEndian.Uint32(head[0:4]) == macho.Magic64 && strings.HasPrefix(platform, "darwin/"):
		if got := binary.LittleEndian.Uint32(head[4:8]); got != want {
			return fmt.Errorf("a Mach-O executable for CPU %v, not %s", macho.Cpu(got), platform)
		}
	default:
		return fmt.Errorf("not an executable for %s (starts %x)", platform, head[:4])
	}
	return nil
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return fmt.Errorf("%s leaves the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.Create(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}

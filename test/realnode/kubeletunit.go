package realnode

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"

	"nodeconfig.io/services/servekit/atomicfile"
)

// The kubelet runs as systemd runs kubeadm's: in a cgroup of its own (the
// unit's), started by its executable's full path. The agent finds it by
// both (the overlay's --consumer-cgroup and --consumer-exe-path), so no
// other process called kubelet counts as it.
const (
	// KubeletCgroup is the kubelet's cgroup as /proc/<pid>/cgroup shows it,
	// on the cgroup2 hierarchy (kubeadm's: /system.slice/kubelet.service).
	KubeletCgroup = kubeletCgroupTop + "/kubelet.service"
	// kubeletCgroupTop is the top-level cgroup the harness creates for it.
	kubeletCgroupTop = "/nodeconfig-realnode"
)

// KubeletBinary is the kubelet's executable, a copy of the built one at a
// path that does not depend on the checkout (kubeadm's: /usr/bin/kubelet).
var KubeletBinary = filepath.Join(Root, "bin", "kubelet")

// kubeletCgroupDir is the kubelet's cgroup directory and, to remove when
// the node stops, the one the harness creates for it at the top.
func kubeletCgroupDir() (dir, top string, err error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return "", "", err
	}
	for _, m := range infos {
		if m.Root == "/" {
			return filepath.Join(m.Mountpoint, KubeletCgroup), filepath.Join(m.Mountpoint, kubeletCgroupTop), nil
		}
	}
	return "", "", fmt.Errorf("no cgroup2 hierarchy is mounted at its root (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1's): the kubelet runs in a cgroup of its own there, as in kubelet.service's")
}

// installKubelet copies the built kubelet to KubeletBinary and creates its
// cgroup directory, dir.
func installKubelet(built, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("the kubelet's cgroup: %w", err)
	}
	src, err := os.Open(built)
	if err != nil {
		return err
	}
	defer src.Close()
	return atomicfile.WriteFrom(KubeletBinary, src, 0o755, 0o755)
}

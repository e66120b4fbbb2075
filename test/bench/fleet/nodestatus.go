package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubeletLikeImages is how many images a kubelet-like Node lists: a
// working node's image cache, as a real kubelet reports up to 50 of them
// (--node-status-max-images).
const kubeletLikeImages = 50

// kubeletLikeNode dresses node as a real kubelet registers and reports
// it: the well-known labels and annotations, addresses, capacity, the
// usual conditions, the node's system info and its images. A status
// patch rewrites the whole object in etcd, so its size drives what a
// fleet's change costs the control plane. The addresses are data only:
// nothing in the fleet dials them.
func kubeletLikeNode(node *corev1.Node, i int) {
	zone := fmt.Sprintf("zone-%c", 'a'+i%3)
	for k, v := range map[string]string{
		"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
		"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
		"node.kubernetes.io/instance-type": "m6i.2xlarge",
		"topology.kubernetes.io/region":    "region-1", "topology.kubernetes.io/zone": zone,
	} {
		node.Labels[k] = v
	}
	// A fleet running node-feature-discovery carries dozens of these.
	for _, feature := range nodeFeatures {
		node.Labels["feature.node.kubernetes.io/"+feature] = "true"
	}
	node.Annotations = map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///run/containerd/containerd.sock",
	}
	node.Spec.PodCIDR = fmt.Sprintf("10.%d.%d.0/24", 64+i/65536, (i/256)%256)
	node.Spec.PodCIDRs = []string{node.Spec.PodCIDR}
	node.Spec.ProviderID = "cloud:///region-1/" + zone + "/" + node.Name
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32211304Ki"),
		corev1.ResourceEphemeralStorage: resource.MustParse("101430960Ki"),
		corev1.ResourcePods:             resource.MustParse("110"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	beat := metav1.Now()
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, LastHeartbeatTime: beat, LastTransitionTime: beat, Reason: reason, Message: message}
	}
	node.Status = corev1.NodeStatus{
		Capacity: resources, Allocatable: resources,
		Conditions: []corev1.NodeCondition{
			condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i/65536, (i/256)%256, i%256)},
			{Type: corev1.NodeHostName, Address: node.Name},
			{Type: corev1.NodeInternalDNS, Address: node.Name + ".region-1.compute.internal"},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: hexOf(node.Name, "machine")[:32], SystemUUID: hexOf(node.Name, "system")[:32], BootID: hexOf(node.Name, "boot")[:32],
			KernelVersion: "6.1.0-28-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "containerd://1.6.20", KubeletVersion: "v1.36.3",
		},
		Images: kubeletLikeImageList(),
	}
	for v := range 4 {
		volume := corev1.UniqueVolumeName(fmt.Sprintf("kubernetes.io/csi/ebs.csi.aws.com^vol-%s", hexOf(node.Name, strconv.Itoa(v))[:17]))
		node.Status.VolumesInUse = append(node.Status.VolumesInUse, volume)
		node.Status.VolumesAttached = append(node.Status.VolumesAttached, corev1.AttachedVolume{Name: volume, DevicePath: ""})
	}
}

// nodeFeatures are node-feature-discovery's names for what a CPU, kernel
// and PCI bus offer, as labels of the Node.
var nodeFeatures = []string{
	"cpu-cpuid.ADX", "cpu-cpuid.AESNI", "cpu-cpuid.AVX", "cpu-cpuid.AVX2", "cpu-cpuid.AVX512BW", "cpu-cpuid.AVX512CD",
	"cpu-cpuid.AVX512DQ", "cpu-cpuid.AVX512F", "cpu-cpuid.AVX512VL", "cpu-cpuid.AVX512VNNI", "cpu-cpuid.CMPXCHG8",
	"cpu-cpuid.FMA3", "cpu-cpuid.FXSR", "cpu-cpuid.FXSROPT", "cpu-cpuid.HYPERVISOR", "cpu-cpuid.LAHF", "cpu-cpuid.MOVBE",
	"cpu-cpuid.MPX", "cpu-cpuid.OSXSAVE", "cpu-cpuid.SHA", "cpu-cpuid.SYSCALL", "cpu-cpuid.SYSEE", "cpu-cpuid.VAES",
	"cpu-cpuid.VPCLMULQDQ", "cpu-cpuid.X87", "cpu-cpuid.XGETBV1", "cpu-cpuid.XSAVE", "cpu-cpuid.XSAVEC",
	"cpu-cpuid.XSAVEOPT", "cpu-cpuid.XSAVES", "cpu-hardware_multithreading", "cpu-model.family",
	"kernel-config.NO_HZ", "kernel-config.NO_HZ_IDLE", "kernel-version.major", "kernel-version.minor",
	"pci-1d0f.present", "storage-nonrotationaldisk", "system-os_release.ID", "system-os_release.VERSION_ID",
}

// kubeletLikeImageList is the same 50 images on every node, as a fleet
// running the same workloads holds: each by digest and by tag.
func kubeletLikeImageList() []corev1.ContainerImage {
	images := make([]corev1.ContainerImage, kubeletLikeImages)
	for k := range images {
		repo := fmt.Sprintf("registry.example.internal/team-%02d/service-%02d", k%7, k)
		images[k] = corev1.ContainerImage{
			Names:     []string{repo + "@sha256:" + hexOf(repo, "digest"), fmt.Sprintf("%s:v1.%d.%d", repo, k%13, k%5)},
			SizeBytes: int64(20_000_000 + k*3_100_000),
		}
	}
	return images
}

func hexOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// storedSize says how big a Node is as the API server returns it, its
// managed fields too: as JSON, and as the protobuf etcd stores.
func storedSize(ctx context.Context, c kubernetes.Interface, name string) (string, error) {
	node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	j, err := json.Marshal(node)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("each about %d bytes as JSON, %d as the protobuf etcd stores", len(j), node.Size()), nil
}

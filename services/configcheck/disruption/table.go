// Package disruption says what a change of the kubelet's effective
// configuration needs beyond a restart: the table of the fields whose change
// the kubelet does not take by a restart alone (Rules), and, for one change,
// the state files to remove, whether the node must be drained first, or
// whether the change is refused (For).
//
// The table was read from the kubelet's sources at v1.36: each rule says
// which of them refuses what. Its checkpoints that no configuration field
// decides (the DRA manager's dra_manager_state, the device manager's
// device-plugins/kubelet_internal_checkpoint, the pod allocation and
// graceful shutdown checkpoints) need nothing on a change of configuration.
package disruption

import (
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
)

// State files of the kubelet, relative to its root directory (--root-dir).
const (
	// CPUManagerState is the CPU manager's checkpoint
	// (pkg/kubelet/cm/cpumanager, cpuManagerStateFileName).
	CPUManagerState = "cpu_manager_state"
	// MemoryManagerState is the memory manager's checkpoint
	// (pkg/kubelet/cm/memorymanager, memoryManagerStateFileName).
	MemoryManagerState = "memory_manager_state"
)

// Rule is one kubelet field whose change needs more than a restart.
type Rule struct {
	// Field is a KubeletConfiguration field (kubelet.config.k8s.io/v1beta1),
	// its JSON names joined by dots: a change of it or beneath it matches.
	Field string
	// Remove are state files, relative to the kubelet's root directory,
	// that the kubelet refuses to start with once the field changed: they
	// are removed while no kubelet runs.
	Remove []string
	// Drain: the node is drained before the kubelet restarts.
	Drain bool
	// Refuse: the change is refused (a late error): no restart, and no
	// drain, makes it safe.
	Refuse bool
	// When, if set, limits the rule to changes of which it holds, given the
	// configurations before and after.
	When func(before, after *kubeletconfig.KubeletConfiguration) bool
	// Why says what the kubelet does on the change, for the messages and
	// the docs.
	Why string
}

// cpuStatic holds when the CPU manager's static policy runs before or
// after: only its checkpoint depends on the reserved CPUs.
func cpuStatic(before, after *kubeletconfig.KubeletConfiguration) bool {
	return before.CPUManagerPolicy == "static" || after.CPUManagerPolicy == "static"
}

// memoryStatic holds when the memory manager's Static policy runs before or
// after: only its checkpoint records the reserved memory.
func memoryStatic(before, after *kubeletconfig.KubeletConfiguration) bool {
	return before.MemoryManagerPolicy == "Static" || after.MemoryManagerPolicy == "Static"
}

// The reasons of the rules, shared where several fields have one.
const (
	whyCPUPolicy = "the kubelet refuses a CPU manager checkpoint written under another policy " +
		`("configured policy differs from state checkpoint policy"), and at its start admits every running pod ` +
		"again under the new policy, which may refuse a Guaranteed pod (it fails) or leave one pinned to the CPUs of the old"
	whyCPUReserved = "under the static policy the checkpoint must hold every reserved CPU in its shared pool " +
		`("not all reserved cpus ... are present in defaultCpuSet"), and each Guaranteed pod's exclusive CPUs are allocated again`
	whyMemoryPolicy = "the kubelet refuses a memory manager checkpoint written under another policy, " +
		"and admits every running pod again under the new one"
	whyTopology = "at its start the kubelet admits every running pod again: one the new alignment refuses " +
		"fails (TopologyAffinityError) instead of moving to a node that can take it"
	whyCgroups = "the pods' cgroups stay where the old layout put them (DaemonSet and static pods through any drain), " +
		"out of the kubelet's reach; it is a node's fact from its provisioning, changed by provisioning it again"
)

// Rules are the kubelet fields whose change needs more than a restart.
var Rules = []Rule{
	{Field: "cpuManagerPolicy", Remove: []string{CPUManagerState}, Drain: true, Why: whyCPUPolicy},
	{Field: "cpuManagerPolicyOptions", Remove: []string{CPUManagerState}, Drain: true, When: cpuStatic,
		Why: "the options decide how the static policy allocates each pod's CPUs, which it does again for every pod; strict-cpu-reservation changes the CPUs its checkpoint must account for"},
	{Field: "reservedSystemCPUs", Remove: []string{CPUManagerState}, Drain: true, When: cpuStatic, Why: whyCPUReserved},
	{Field: "kubeReserved.cpu", Remove: []string{CPUManagerState}, Drain: true, When: cpuStatic, Why: whyCPUReserved + " (it sizes the reserved CPUs without reservedSystemCPUs)"},
	{Field: "systemReserved.cpu", Remove: []string{CPUManagerState}, Drain: true, When: cpuStatic, Why: whyCPUReserved + " (it sizes the reserved CPUs without reservedSystemCPUs)"},
	{Field: "memoryManagerPolicy", Remove: []string{MemoryManagerState}, Drain: true, Why: whyMemoryPolicy},
	{Field: "reservedMemory", Remove: []string{MemoryManagerState}, Drain: true, When: memoryStatic,
		Why: `the Static policy's checkpoint records the memory each NUMA node reserves ("the expected machine state is different from the real one")`},
	{Field: "topologyManagerPolicy", Drain: true, Why: whyTopology},
	{Field: "topologyManagerScope", Drain: true, Why: whyTopology},
	{Field: "topologyManagerPolicyOptions", Drain: true, Why: whyTopology},
	{Field: "cgroupDriver", Refuse: true, Why: "it must be the container runtime's (which tells the kubelet its own where it can), and the agent does not change the runtime; " + whyCgroups},
	{Field: "cgroupRoot", Refuse: true, Why: whyCgroups},
	{Field: "cgroupsPerQOS", Refuse: true, Why: whyCgroups},
}

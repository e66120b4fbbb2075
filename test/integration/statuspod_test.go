package integration

import (
	"context"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

// statusd runs in a Pod of its own, as built from deploy/ and from the real
// node's overlay of it: not root, no capabilities, neither the host's PIDs
// nor its network, under its own ServiceAccount, with checkpointd's socket
// reached through the host directory checkpointd serves it in, given to
// statusd's group. checkpointd outranks it, so that where a config leaves
// room for one of them the kubelet keeps the one that rolls back.
func TestStatusdRunsApartWithoutRootNorHostPIDs(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"deploy", "test/realnode/overlay"} {
		t.Run(dir, func(t *testing.T) {
			built, err := kubectl(t, "", "kustomize", filepath.Join(root, dir))
			if err != nil {
				t.Fatalf("kubectl kustomize: %v\n%s", err, built)
			}
			agent, status := daemonSet(t, built, "nodeconfig-agent"), daemonSet(t, built, "nodeconfig-status")
			checkStatusdApart(t, agent, status)
		})
	}
}

func checkStatusdApart(t *testing.T, agent, status *appsv1.DaemonSet) {
	t.Helper()
	ap, sp := agent.Spec.Template.Spec, status.Spec.Template.Spec
	checkpointd, statusd := container(t, ap, "checkpointd"), container(t, sp, "statusd")
	if len(ap.Containers) != 1 {
		t.Errorf("the agent's Pod runs %d containers, want checkpointd alone", len(ap.Containers))
	}
	if !ap.HostPID {
		t.Error("checkpointd does not see the host's PIDs: it cannot find the kubelet")
	}
	if sp.HostPID || sp.HostNetwork || sp.HostIPC {
		t.Errorf("statusd's Pod shares the host's PIDs (%v), network (%v) or IPC (%v)", sp.HostPID, sp.HostNetwork, sp.HostIPC)
	}
	if sp.ServiceAccountName != "nodeconfig-status" || ap.ServiceAccountName != "nodeconfig-agent" {
		t.Errorf("ServiceAccounts: statusd %q, checkpointd %q; want one each", sp.ServiceAccountName, ap.ServiceAccountName)
	}
	// The reconciler finds each node's checkpointd by its label (its
	// --agent-selector); statusd's Pods must not answer to it.
	if status.Spec.Template.Labels["app.kubernetes.io/name"] == "nodeconfig-agent" {
		t.Error("statusd's Pods carry the label the reconciler finds checkpointd by")
	}

	uid, gid, nonRoot := identity(sp, statusd)
	if uid == nil || *uid != 65532 || gid == nil || *gid != 65532 || nonRoot == nil || !*nonRoot {
		t.Errorf("statusd runs as uid %v gid %v runAsNonRoot %v; want 65532, 65532, true", deref(uid), deref(gid), deref(nonRoot))
	}
	sc := statusd.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("statusd's securityContext %+v: want no escalation, a read-only root, every capability dropped and none added", sc)
	}

	// checkpointd's socket, given to statusd's group, in a host directory
	// both Pods mount.
	socket, group := flagValue(checkpointd, "--socket"), flagValue(checkpointd, "--socket-group")
	if group == "" || gid == nil || group != strconv.FormatInt(*gid, 10) {
		t.Errorf("checkpointd's --socket-group %q, statusd's group %v: want statusd's", group, deref(gid))
	}
	if ap.SecurityContext == nil || gid == nil || !slices.Contains(ap.SecurityContext.SupplementalGroups, *gid) {
		t.Error("checkpointd is not in statusd's group: it cannot give its socket to it without CAP_CHOWN")
	}
	if got := flagValue(statusd, "--checkpointd"); got != "unix://"+socket {
		t.Errorf("statusd dials %q, checkpointd serves unix://%s", got, socket)
	}
	ckDir, stDir := hostDirOf(t, ap, checkpointd, path.Dir(socket)), hostDirOf(t, sp, statusd, path.Dir(socket))
	if ckDir == "" || ckDir != stDir {
		t.Errorf("checkpointd serves its socket in host directory %q, statusd reads %q", ckDir, stDir)
	}

	// Priorities as the API server defines them.
	value := func(class string) int32 {
		pc, err := cluster.Shared.Client.SchedulingV1().PriorityClasses().Get(context.Background(), class, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("priority class %q: %v", class, err)
		}
		return pc.Value
	}
	if ck, st := value(ap.PriorityClassName), value(sp.PriorityClassName); ck <= st {
		t.Errorf("checkpointd's priority %d (%s) does not outrank statusd's %d (%s)", ck, ap.PriorityClassName, st, sp.PriorityClassName)
	}
}

// daemonSet is the DaemonSet named name in kustomize's output.
func daemonSet(t *testing.T, built, name string) *appsv1.DaemonSet {
	t.Helper()
	docs := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(built), 4096)
	for {
		var ds appsv1.DaemonSet
		if err := docs.Decode(&ds); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if ds.Kind == "DaemonSet" && ds.Name == name {
			return &ds
		}
	}
	t.Fatalf("no DaemonSet %s", name)
	return nil
}

func container(t *testing.T, spec corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// identity is the user, group and runAsNonRoot a container runs with: its
// own securityContext's, else its Pod's.
func identity(spec corev1.PodSpec, c *corev1.Container) (uid, gid *int64, nonRoot *bool) {
	if p := spec.SecurityContext; p != nil {
		uid, gid, nonRoot = p.RunAsUser, p.RunAsGroup, p.RunAsNonRoot
	}
	if s := c.SecurityContext; s != nil {
		uid, gid, nonRoot = first(s.RunAsUser, uid), first(s.RunAsGroup, gid), first(s.RunAsNonRoot, nonRoot)
	}
	return uid, gid, nonRoot
}

func first[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// flagValue is the last value of --name=value in the container's args (the
// last of a repeated flag wins).
func flagValue(c *corev1.Container, name string) string {
	v := ""
	for _, a := range c.Args {
		if val, ok := strings.CutPrefix(a, name+"="); ok {
			v = val
		}
	}
	return v
}

// hostDirOf is the host directory the container sees at dir: a hostPath
// volume mounted exactly there.
func hostDirOf(t *testing.T, spec corev1.PodSpec, c *corev1.Container, dir string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != dir {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return path.Clean(v.HostPath.Path)
			}
		}
		t.Errorf("container %s mounts %s from volume %s, which is no hostPath", c.Name, dir, m.Name)
		return ""
	}
	t.Errorf("container %s mounts nothing at %s", c.Name, dir)
	return ""
}

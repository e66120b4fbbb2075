package realnode_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// The release as docs/release.md, docs/upgrade.md and docs/uninstall.md
// say, on a real kubelet with no registry. Two releases are built (make
// release, this machine's platform only); the first is loaded into
// containerd from its OCI archives and installed from its install.yaml
// (with this node's overlay on top), and becomes ready running the digests
// install.yaml names, as containerd and the running processes show them. A
// NodeConfig rolled out, the second release is installed over the first:
// the node stays on its config and the kubelet is not restarted. Then the
// uninstall of docs/uninstall.md, which keeps the node's config: no object
// of the install is left, the node runs its config on the same kubelet, and
// the start guard and the store stay on the node, as the page says.
//
// It removes whatever install an earlier test of the package left, and
// leaves none.
func TestReleaseInstallsUpgradesAndUninstalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	work := t.TempDir()
	first := buildRelease(t, work, "v0.2.0")
	second := buildRelease(t, work, "v0.2.1")
	for svc, img := range first.images {
		if second.images[svc].serviceSHA == img.serviceSHA || second.images[svc].index == img.index {
			t.Fatalf("%s: v0.2.0 and v0.2.1 build the same image", svc)
		}
	}
	removeEarlierInstall(ctx, t, work)

	// Install the first release with no registry.
	runReadmeCommand(ctx, t, work, `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
  -subj /CN=nodeconfig-agent-ca -addext basicConstraints=critical,CA:TRUE \
  -addext keyUsage=critical,keyCertSign,cRLSign -keyout ca.key -out ca.crt`)
	runReadmeCommand(ctx, t, work, `kubectl create namespace nodeconfig-system`)
	runReadmeCommand(ctx, t, work, `kubectl -n nodeconfig-system create secret tls nodeconfig-agent-ca --cert=ca.crt --key=ca.key`)
	applied := installRelease(ctx, t, work, first)
	waitReleaseReady(ctx, t, work, first, applied)

	// A NodeConfig rolled out, then the upgrade.
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 61\n' > release.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./release.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	runReadmeCommand(ctx, t, work, `kubectl create role nodeconfig-source -n kube-system --verb=get,list,watch --resource=configmaps --resource-name=kubelet-config --dry-run=client -o yaml | kubectl apply -f -`)
	runReadmeCommand(ctx, t, work, `kubectl create rolebinding nodeconfig-source -n kube-system --role=nodeconfig-source --serviceaccount=nodeconfig-system:nodeconfig-reconciler --dry-run=client -o yaml | kubectl apply -f -`)
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: nodeconfig.io/v1alpha1\nkind: NodeConfig\nmetadata: {name: release}\nspec:\n  nodeSelector: {}\n  source: {configMap: {namespace: kube-system, name: kubelet-config, key: config.yaml}}\n  validator: kubelet\n  soakSeconds: 10\n' > nc.yaml && kubectl apply -f nc.yaml`)
	cm := configMapVersion(ctx, t)
	waitStatus(ctx, t, "maxPods 61 last-known-good", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == cm && c.Reason == "Active"
	})
	waitKubeletHealthyOn(ctx, t, 61)
	dropInBefore, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn))
	if err != nil {
		t.Fatal(err)
	}
	pid, starts := node.Kubelet.Pid(), node.Kubelet.Starts()
	onConfig := func(when string) {
		t.Helper()
		waitStatus(ctx, t, "still on maxPods 61 "+when, func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return nodeview.ResourceVersion(st.Assigned) == cm && nodeview.ResourceVersion(st.Active) == cm &&
				nodeview.ResourceVersion(st.LastKnownGood) == cm && c.Reason == "Active" && st.Error == ""
		})
	}
	kubeletUntouched := func(when string) {
		t.Helper()
		if node.Kubelet.Pid() != pid || node.Kubelet.Starts() != starts {
			t.Fatalf("%s: kubelet pid %d (was %d), %d starts (was %d)", when, node.Kubelet.Pid(), pid, node.Kubelet.Starts(), starts)
		}
		if b, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn)); err != nil || !bytes.Equal(b, dropInBefore) {
			t.Fatalf("%s: drop-in %q (%v), was %q", when, b, err, dropInBefore)
		}
		waitKubeletHealthyOn(ctx, t, 61)
	}

	applied = installRelease(ctx, t, work, second)
	waitReleaseReady(ctx, t, work, second, applied)
	// The new reconciler leads and has judged the NodeConfig; the node is on
	// its config as before, reported by the new agent.
	waitNewLeader(ctx, t, second)
	runReadmeCommand(ctx, t, work, `kubectl wait nodeconfig release --for=condition=Ready --timeout=120s`)
	onConfig("after the upgrade")
	kubeletUntouched("after the upgrade")

	// The uninstall, keeping the node's config, as docs/uninstall.md runs it.
	uninstall := docsBlock(t, "docs/uninstall.md", "uninstall")
	runReadmeCommand(ctx, t, work, strings.ReplaceAll(uninstall, "install.yaml", applied))
	checkNothingLeft(ctx, t, work, applied)
	kubeletUntouched("after the uninstall")
	if _, err := os.Stat(filepath.Join(realnode.KubeletUnitDir, "05-nodeconfig-guard.conf")); err != nil {
		t.Errorf("the start guard's drop-in, which docs/uninstall.md says stays: %v", err)
	}
	if entries, err := os.ReadDir(realnode.AgentStateDir); err != nil || len(entries) == 0 {
		t.Errorf("the agent's store, which docs/uninstall.md says stays: %d entries, %v", len(entries), err)
	}
}

// release is one built release: its directory and what the test read from
// its image archives itself.
type release struct {
	version, dir string
	images       map[string]archiveImage // by service
}

type archiveImage struct {
	name  string // REGISTRY/SERVICE:VERSION
	index string // the index's digest
	// config and serviceSHA are this machine's platform's: its image's
	// config digest, and the sha256 of the /service its layer holds.
	config, serviceSHA string
}

// ref is the image by index digest.
func (a archiveImage) ref() string {
	return a.name[:strings.LastIndex(a.name, ":")] + "@" + a.index
}

// buildRelease runs make release for this machine's platform alone.
func buildRelease(t *testing.T, work, version string) release {
	t.Helper()
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(work, version)
	platform := "linux/" + runtime.GOARCH
	start := time.Now()
	cmd := exec.Command("make", "release", "VERSION="+version, "DIST="+dir, "RELEASE_PLATFORMS="+platform,
		"PLUGIN_PLATFORMS="+platform, "RELEASE_BIN="+filepath.Join(work, "bin"))
	cmd.Dir = root
	// Not the jobs of a make this test may run under.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release %s: %v\n%s", version, err, out)
	}
	t.Logf("make release VERSION=%s (%s only) took %s", version, platform, time.Since(start).Round(time.Second))
	r := release{version: version, dir: dir, images: map[string]archiveImage{}}
	for _, svc := range []string{"checkpointd", "statusd", "reconciler"} {
		r.images[svc] = readArchive(t, filepath.Join(dir, svc+"-"+version+".oci.tar"))
	}
	return r
}

// readArchive reads an OCI archive on its own (no library of the release's):
// index.json, the index, this platform's manifest, config and layer.
func readArchive(t *testing.T, path string) archiveImage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	blob := func(digest string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("%s has no blob %s", path, digest)
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != digest {
			t.Fatalf("%s: blob %s does not have its digest", path, digest)
		}
		return b
	}
	type descriptor struct {
		Digest      string            `json:"digest"`
		Annotations map[string]string `json:"annotations"`
		Platform    struct{ OS, Architecture string }
	}
	var top, index struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("%s: index.json %s (%v)", path, files["index.json"], err)
	}
	img := archiveImage{name: top.Manifests[0].Annotations["io.containerd.image.name"], index: top.Manifests[0].Digest}
	if err := json.Unmarshal(blob(img.index), &index); err != nil {
		t.Fatal(err)
	}
	for _, m := range index.Manifests {
		if m.Platform.OS != "linux" || m.Platform.Architecture != runtime.GOARCH {
			continue
		}
		var manifest struct {
			Config descriptor
			Layers []descriptor
		}
		if err := json.Unmarshal(blob(m.Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
			t.Fatalf("%s: manifest %s: %v", path, m.Digest, err)
		}
		img.config = manifest.Config.Digest
		gz, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0].Digest)))
		if err != nil {
			t.Fatal(err)
		}
		lr := tar.NewReader(gz)
		for {
			h, err := lr.Next()
			if err != nil {
				t.Fatalf("%s: no /service in the layer (%v)", path, err)
			}
			if h.Name == "service" {
				b, err := io.ReadAll(lr)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(b)
				img.serviceSHA = hex.EncodeToString(sum[:])
				return img
			}
		}
	}
	t.Fatalf("%s: no image for linux/%s", path, runtime.GOARCH)
	return img
}

// removeEarlierInstall removes what an earlier test installed (the README's
// install: the same objects), NodeConfigs first.
func removeEarlierInstall(ctx context.Context, t *testing.T, work string) {
	t.Helper()
	if _, err := node.Cluster.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err != nil {
		return
	}
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	runReadmeCommand(ctx, t, work, "kubectl delete nodeconfigs --all --wait=true --timeout=3m")
	runReadmeCommand(ctx, t, work, "kubectl delete -k "+filepath.Join(root, "test", "realnode", "overlay")+" --ignore-not-found --wait=true --timeout=3m")
}

// installRelease loads r's archives into containerd as docs/release.md
// says, renders its install.yaml with this node's overlay on top, applies it
// and returns the file applied.
func installRelease(ctx context.Context, t *testing.T, work string, r release) string {
	t.Helper()
	for svc, img := range r.images {
		base := img.name[:strings.LastIndex(img.name, ":")]
		runReadmeCommand(ctx, t, r.dir, fmt.Sprintf("ctr -n k8s.io images import --digests --base-name %s %s-%s.oci.tar", base, svc, r.version))
	}
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(work, "overlay-"+r.version)
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"agent.yaml", "reconciler.yaml", "kustomization.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "test", "realnode", "overlay", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "kustomization.yaml" {
			// The same patches, over the release's install.yaml in place of deploy/.
			if !bytes.Contains(b, []byte("  - ../../../deploy\n")) {
				t.Fatalf("test/realnode/overlay/kustomization.yaml no longer names ../../../deploy:\n%s", b)
			}
			b = bytes.Replace(b, []byte("  - ../../../deploy\n"), []byte("  - install.yaml\n"), 1)
		}
		if err := os.WriteFile(filepath.Join(overlay, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install, err := os.ReadFile(filepath.Join(r.dir, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "install.yaml"), install, 0o644); err != nil {
		t.Fatal(err)
	}
	applied := filepath.Join(work, "applied-"+r.version+".yaml")
	runReadmeCommand(ctx, t, work, fmt.Sprintf("kubectl kustomize %s > %s", overlay, applied))
	runReadmeCommand(ctx, t, work, "kubectl apply -f "+applied)
	return applied
}

// waitReleaseReady waits for every workload of the applied file to roll
// out, then checks what runs: every container of the install runs the image
// the file names by digest (the file's digest is the archive's index),
// containerd's image behind each running container is that index, and each
// running process's executable is the archive's /service.
func waitReleaseReady(ctx context.Context, t *testing.T, work string, r release, applied string) {
	t.Helper()
	want := map[string]archiveImage{} // container name -> its image
	for _, w := range workloads(t, applied) {
		runReadmeCommand(ctx, t, work, fmt.Sprintf("kubectl -n %s rollout status %s/%s --timeout=3m", namespace, strings.ToLower(w.Kind), w.Metadata.Name))
		for _, c := range w.Spec.Template.Spec.Containers {
			at := strings.Index(c.Image, "@")
			if at < 0 {
				t.Fatalf("%s runs %s in container %s: not by digest", w.Metadata.Name, c.Image, c.Name)
			}
			img, ok := r.images[c.Image[strings.LastIndex(c.Image[:at], "/")+1:at]]
			if !ok || c.Image != img.ref() {
				t.Fatalf("%s runs %s in container %s; the archives hold %v", w.Metadata.Name, c.Image, c.Name, r.images)
			}
			want[c.Name] = img
		}
	}
	if err := proc.WaitFor(3*time.Minute, func() (bool, error) {
		return checkRunning(ctx, want)
	}); err != nil {
		t.Fatalf("%s is not what runs: %v\n%s", r.version, err, diagnose(ctx))
	}
	t.Logf("%s runs: %v", r.version, want)
}

type workload struct {
	Kind     string
	Metadata struct{ Name string }
	Spec     struct {
		Template struct {
			Spec struct {
				Containers []struct{ Name, Image string }
			}
		}
	}
}

func workloads(t *testing.T, applied string) []workload {
	t.Helper()
	b, err := os.ReadFile(applied)
	if err != nil {
		t.Fatal(err)
	}
	var out []workload
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var w workload
		if err := yaml.Unmarshal([]byte(doc), &w); err != nil {
			t.Fatal(err)
		}
		if w.Kind == "DaemonSet" || w.Kind == "Deployment" {
			out = append(out, w)
		}
	}
	if len(out) < 2 {
		t.Fatalf("%s holds %d workloads", applied, len(out))
	}
	return out
}

// checkRunning asks containerd (not the kubelet nor the API server) what
// runs in the install's namespace: each running container's image resolves
// to its archive's index (or is its config's digest), and its process runs
// the archive's /service. Every container name of want runs, and nothing
// else of the namespace does.
func checkRunning(ctx context.Context, want map[string]archiveImage) (bool, error) {
	images := map[string]string{} // containerd image name -> target digest
	out, err := node.Shell(ctx, os.TempDir(), "ctr -n k8s.io images ls")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 3 {
			images[f[0]] = f[2]
		}
	}
	out, err = node.Shell(ctx, os.TempDir(), "ctr -n k8s.io tasks ls")
	if err != nil {
		return false, err
	}
	seen := map[string]int{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "RUNNING" {
			continue
		}
		info, err := node.Shell(ctx, os.TempDir(), "ctr -n k8s.io containers info "+f[0])
		if err != nil {
			return false, err
		}
		var c struct {
			Image      string
			Labels     map[string]string
			Extensions map[string]struct {
				Value []byte `json:"value"`
			}
		}
		if err := json.Unmarshal(info, &c); err != nil {
			return false, fmt.Errorf("container %s: %v", f[0], err)
		}
		// The CRI plugin keeps the image it resolved (its config's digest)
		// in the container's metadata; containerd may name no image.
		var meta struct{ Metadata struct{ ImageRef string } }
		if ext, ok := c.Extensions["io.cri-containerd.container.metadata"]; ok {
			if err := json.Unmarshal(ext.Value, &meta); err != nil {
				return false, fmt.Errorf("container %s's CRI metadata: %v", f[0], err)
			}
		}
		name := c.Labels["io.kubernetes.container.name"]
		if c.Labels["io.kubernetes.pod.namespace"] != namespace || name == "" || name == "POD" {
			continue
		}
		img, ok := want[name]
		if !ok {
			return false, fmt.Errorf("container %s of pod %s runs in the install's namespace", name, c.Labels["io.kubernetes.pod.name"])
		}
		byName := c.Image != "" && images[c.Image] == img.index
		if !byName && meta.Metadata.ImageRef != img.config {
			return false, fmt.Errorf("container %s (pod %s) runs image %q (target %q, CRI image %q), not %s (config %s)",
				name, c.Labels["io.kubernetes.pod.name"], c.Image, images[c.Image], meta.Metadata.ImageRef, img.ref(), img.config)
		}
		exe, err := os.ReadFile("/proc/" + f[1] + "/exe")
		if err != nil {
			return false, fmt.Errorf("container %s: %v", name, err)
		}
		if sum := sha256.Sum256(exe); hex.EncodeToString(sum[:]) != img.serviceSHA {
			return false, fmt.Errorf("container %s (pid %s) runs an executable that is not %s's /service", name, f[1], img.name)
		}
		seen[name]++
	}
	for name := range want {
		if seen[name] == 0 {
			return false, fmt.Errorf("no container %s runs (running: %v)", name, seen)
		}
	}
	return true, nil
}

// waitNewLeader waits until a reconciler Pod of r holds the Lease.
func waitNewLeader(ctx context.Context, t *testing.T, r release) {
	t.Helper()
	err := proc.WaitFor(3*time.Minute, func() (bool, error) {
		lease, err := node.Cluster.Client.CoordinationV1().Leases(namespace).Get(ctx, "nodeconfig-reconciler", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, fmt.Errorf("no leader (%v)", err)
		}
		pod, err := node.Cluster.Client.CoreV1().Pods(namespace).Get(ctx, *lease.Spec.HolderIdentity, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("leader %s: %v", *lease.Spec.HolderIdentity, err)
		}
		return pod.Spec.Containers[0].Image == r.images["reconciler"].ref(), fmt.Errorf("leader %s runs %s", pod.Name, pod.Spec.Containers[0].Image)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docsBlock is the sh block of doc between <!-- name:begin --> and
// <!-- name:end -->.
func docsBlock(t *testing.T, doc, name string) string {
	t.Helper()
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + name + ":begin -->\n```sh\n(.*?)```\n<!-- " + name + ":end -->").FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no sh block between <!-- %s:begin --> and <!-- %s:end -->", doc, name, name)
	}
	return string(m[1])
}

// checkNothingLeft: no object of the applied file is left, no container of
// the install runs, no CSR of the agents' signer is left, and the Node has
// no annotation nor condition of the install's.
func checkNothingLeft(ctx context.Context, t *testing.T, work, applied string) {
	t.Helper()
	out, err := node.Shell(ctx, work, "kubectl get -f "+applied+" --ignore-not-found -o name")
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("objects of the install left: %s (%v)", out, err)
	}
	if err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		ok, err := checkRunning(ctx, map[string]archiveImage{})
		return ok, err
	}); err != nil {
		t.Errorf("containers of the install still run: %v", err)
	}
	csrs, err := node.Cluster.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=nodeconfig.io/agent-serving"})
	if err != nil || len(csrs.Items) != 0 {
		t.Errorf("%d CSRs of the agents left (%v)", len(csrs.Items), err)
	}
	n, err := node.Cluster.Client.CoreV1().Nodes().Get(ctx, realnode.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, "nodeconfig.io/") {
			t.Errorf("the Node keeps the annotation %s", k)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == "NodeConfigReady" {
			t.Errorf("the Node keeps the condition %s", c.Type)
		}
	}
}

// Package cluster starts a real etcd and kube-apiserver on loopback for
// integration tests and 'make run': fresh certificates, a kubeconfig, the
// CRDs from deploy/crd installed, and on Stop exactly its own processes
// stopped. A test package shares one cluster through Main.
package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/test/framework/proc"
)

// Options tune Start.
type Options struct {
	// Dir holds certs, data and logs; a restart with the same Dir keeps etcd's data.
	Dir string
	// DurableEtcd keeps etcd's fsync (make run); tests skip it for speed.
	DurableEtcd bool
	// AuditLog writes the API server's audit log to Dir/audit.log
	// (auditPolicy: metadata level; TokenRequests with their request).
	AuditLog bool
	// RealNode readies the API server for a real kubelet and real pods: it
	// also listens on PodsReachAt (an address on the node's pod bridge, named
	// in its certificate) at a fixed Port, admits pods with their
	// ServiceAccount tokens, and authorizes kubelets with the Node authorizer.
	RealNode    bool
	PodsReachAt net.IP
	Port        int
	// PriorityAndFairness runs the API server with its default request
	// queuing (API Priority and Fairness), as clusters run it; without, it
	// answers 429 past 400 reads or 200 writes in flight.
	PriorityAndFairness bool
}

// Cluster is a running control plane.
type Cluster struct {
	Dir        string
	Kubeconfig string
	URL        string
	// EtcdURL is etcd's client address, which serves its metrics too.
	EtcdURL   string
	Config    *rest.Config
	Client    kubernetes.Interface
	Etcd      *proc.Process
	APIServer *proc.Process
	pki       *controlPlanePKI
}

// auditPolicy logs every request's metadata, and TokenRequests with their
// request body too: its audiences say which node's token the reconciler
// minted (test/framework/audit.TokenRequests). The response, with the token, is never
// logged; a TokenReview's request holds a token and stays at metadata.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [create]
  resources:
  - group: ""
    resources: [serviceaccounts/token]
- level: Metadata
`

// notOurs is the environment of the control plane's processes: the race
// pass's cache mutation detector (make test) checks nodeconfig's services,
// not the API server's own informers, which it would make keep a copy of
// every object they cache.
var notOurs = []string{"KUBE_CACHE_MUTATION_DETECTOR=false"}

// Start brings up etcd and kube-apiserver and installs the CRDs.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	etcdBin, err := proc.Binary("etcd")
	if err != nil {
		return nil, err
	}
	apiBin, err := proc.Binary("kube-apiserver")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: o.Dir}
	var serverIPs []net.IP
	if o.PodsReachAt != nil {
		serverIPs = append(serverIPs, o.PodsReachAt)
	}
	if c.pki, err = newPKI(filepath.Join(o.Dir, "pki"), serverIPs); err != nil {
		return nil, fmt.Errorf("make certificates: %w", err)
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = proc.FreePort(); err != nil {
			return nil, err
		}
	}
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcdArgs := []string{
		"--data-dir", filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
		"--initial-cluster", "default=" + etcdPeer,
		"--log-level", "warn",
	}
	if !o.DurableEtcd {
		etcdArgs = append(etcdArgs, "--unsafe-no-fsync")
	}
	if c.Etcd, err = proc.Start("etcd", etcdBin, etcdArgs, filepath.Join(o.Dir, "logs", "etcd.log"), notOurs...); err != nil {
		return nil, err
	}
	if o.Port != 0 {
		ports[2] = o.Port
	}
	c.EtcdURL = etcdClient
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	bind, advertise := "127.0.0.1", "127.0.0.1"
	if o.PodsReachAt != nil {
		// One address cannot be both loopback (tests) and on the bridge (pods).
		bind, advertise = "0.0.0.0", o.PodsReachAt.String()
	}
	apiArgs := []string{
		"--etcd-servers", etcdClient,
		"--bind-address", bind, "--advertise-address", advertise,
		"--secure-port", strconv.Itoa(ports[2]),
		"--cert-dir", filepath.Join(o.Dir, "pki"),
		"--tls-cert-file", c.pki.serverCert, "--tls-private-key-file", c.pki.serverKey,
		"--client-ca-file", c.pki.caCert,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", c.pki.saPub, "--service-account-signing-key-file", c.pki.saKey,
		"--api-audiences", "https://kubernetes.default.svc",
		"--endpoint-reconciler-type", "none",
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--enable-priority-and-fairness=" + strconv.FormatBool(o.PriorityAndFairness),
		"--v", "1",
	}
	if o.RealNode {
		apiArgs = append(apiArgs,
			"--authorization-mode", "Node,RBAC",
			"--enable-admission-plugins", "NodeRestriction",
			"--kubelet-client-certificate", c.pki.adminCert, "--kubelet-client-key", c.pki.adminKey,
			"--kubelet-certificate-authority", c.pki.caCert,
			"--kubelet-preferred-address-types", "InternalIP")
	} else {
		// Without a kubelet nothing mounts ServiceAccount tokens.
		apiArgs = append(apiArgs, "--authorization-mode", "RBAC", "--disable-admission-plugins", "ServiceAccount")
	}
	if o.AuditLog {
		policy := filepath.Join(o.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return nil, err
		}
		// One file, never rotated (the default rotates at 100 MB, which a
		// 10,000-node fleet run passes): the write counts read it whole.
		apiArgs = append(apiArgs, "--audit-policy-file", policy, "--audit-log-path", filepath.Join(o.Dir, "audit.log"),
			"--audit-log-maxsize", "1000000")
	}
	if c.APIServer, err = proc.Start("kube-apiserver", apiBin, apiArgs, filepath.Join(o.Dir, "logs", "kube-apiserver.log"), notOurs...); err != nil {
		c.Stop()
		return nil, err
	}
	c.Kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	if err := c.writeKubeconfig(); err != nil {
		c.Stop()
		return nil, err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		c.Stop()
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 500, 1000
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.WaitReady(ctx, 60*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.InstallCRDs(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// WaitReady waits for /readyz.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := proc.WaitFor(timeout, func() (bool, error) {
		if !c.APIServer.Running() {
			return false, fmt.Errorf("kube-apiserver exited: %v\n%s", c.APIServer.ExitError(), c.APIServer.Tail(3000))
		}
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("readyz: %v: %s", err, body)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready: %w (logs in %s)", err, c.APIServer.LogPath)
	}
	return nil
}

func (c *Cluster) writeKubeconfig() error {
	return c.writeKubeconfigFor(c.Kubeconfig, c.pki.adminCertPEM, c.pki.adminKeyPEM)
}

func (c *Cluster) writeKubeconfigFor(path string, certPEM, keyPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodeconfig"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["nodeconfig"] = &clientcmdapi.Context{Cluster: "nodeconfig", AuthInfo: "user"}
	cfg.CurrentContext = "nodeconfig"
	return clientcmd.WriteToFile(*cfg, path)
}

// InstallCRDs creates every CRD in deploy/crd and waits until each is
// established.
func (c *Cluster) InstallCRDs(ctx context.Context) error {
	root, err := proc.RepoRoot()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "crd", "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	client, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for _, f := range files {
		buf, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(buf, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD from %s: %w", f, err)
		}
		err = proc.WaitFor(30*time.Second, func() (bool, error) {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, fmt.Errorf("CRD %s not established", crd.Name)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the API server, then etcd.
func (c *Cluster) Stop() {
	if c.APIServer != nil {
		_ = c.APIServer.Stop(10 * time.Second)
	}
	if c.Etcd != nil {
		_ = c.Etcd.Stop(10 * time.Second)
	}
}

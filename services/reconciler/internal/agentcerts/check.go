// Package agentcerts approves and signs the agents' serving certificates:
// CertificateSigningRequests for the signer nodeconfig.io/agent-serving,
// each from an agent's ServiceAccount token bound to a Pod on a node, for
// the name of that node alone (and that Pod's addresses, for metrics
// scrapers). The reconciler then checks that name when it dials the node
// (agents.Credentials), so one node's agent cannot pose as another's.
package agentcerts

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"nodeconfig.io/services/api/v1alpha1"
)

// NodeNameExtra is the extra the API server puts on a request made with a
// ServiceAccount token bound to a Pod: the name of the Pod's node
// (Kubernetes 1.30 and later). A node's kubelet can mint such tokens only
// for its own Pods, so the name is the node the agent runs on.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Reasons of a refused request's Denied (or Failed, once approved by
// someone else) condition.
const (
	ReasonNotAnAgent = "NotTheAgentServiceAccount"
	ReasonNoNode     = "NoNodeInCredentials"
	ReasonBadRequest = "RequestNotForOwnNode"
	// ReasonApproved is the Approved condition's reason.
	ReasonApproved = "AgentOwnNode"
)

// Refusal says why a request is not signed.
type Refusal struct {
	Reason, Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// PodNameExtra and PodUIDExtra are the Pod a requester's token is bound
// to, which the API server puts beside NodeNameExtra.
const (
	PodNameExtra = "authentication.kubernetes.io/pod-name"
	PodUIDExtra  = "authentication.kubernetes.io/pod-uid"
)

// Request is a request found fit: the node it is for and what it asks.
type Request struct {
	Node string
	// Name is the one DNS name the certificate carries.
	Name string
	// IPs are the addresses it asks for besides (metrics scrapers dial the
	// agent's address), each to be found among its Pod's (PodIPs).
	IPs []net.IP
	CSR *x509.CertificateRequest
	// Pod and PodUID are the requester's Pod, when IPs are asked for.
	Pod, PodUID string
}

// allowedUsages are what a serving certificate may ask for; server auth is
// required.
var allowedUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth,
}

// Check decides on a request for the agents' signer: it is fit when the
// agents' ServiceAccount (agentUser, system:serviceaccount:NS:NAME) asked,
// with a token bound to a Pod on node N, for a serving certificate whose
// only name is N's (N + v1alpha1.AgentServingNameSuffix). Anything else is
// a Refusal. Addresses it asks for are checked against its Pod after
// (PodIPs).
func Check(csr *certificatesv1.CertificateSigningRequest, agentUser string) (*Request, *Refusal) {
	if csr.Spec.SignerName != v1alpha1.AgentServingSigner {
		return nil, &Refusal{ReasonBadRequest, fmt.Sprintf("signer %q is not %s", csr.Spec.SignerName, v1alpha1.AgentServingSigner)}
	}
	if csr.Spec.Username != agentUser {
		return nil, &Refusal{ReasonNotAnAgent, fmt.Sprintf("requested by %q; only %s gets agent serving certificates", csr.Spec.Username, agentUser)}
	}
	nodes := csr.Spec.Extra[NodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return nil, &Refusal{ReasonNoNode, "the requester's credentials name no node: request with the agent Pod's own ServiceAccount token (bound to the Pod; Kubernetes 1.30 or later)"}
	}
	node := nodes[0]
	name := node + v1alpha1.AgentServingNameSuffix
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return nil, &Refusal{ReasonBadRequest, err.Error()}
	}
	if req.Subject.CommonName != name || !slices.Equal(req.DNSNames, []string{name}) || len(req.URIs) != 0 || len(req.EmailAddresses) != 0 {
		return nil, &Refusal{ReasonBadRequest, fmt.Sprintf("node %s's agent may ask for its own name alone (common name and one DNS name %s) and its Pod's addresses, not CN %q DNS %q URI %v email %q",
			node, name, req.Subject.CommonName, req.DNSNames, req.URIs, req.EmailAddresses)}
	}
	r := &Request{Node: node, Name: name, IPs: req.IPAddresses, CSR: req}
	if len(r.IPs) != 0 {
		pods, uids := csr.Spec.Extra[PodNameExtra], csr.Spec.Extra[PodUIDExtra]
		if len(pods) != 1 || len(uids) != 1 {
			return nil, &Refusal{ReasonNoNode, "IP addresses are signed only for a requester whose credentials name its Pod"}
		}
		r.Pod, r.PodUID = pods[0], uids[0]
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
		return nil, &Refusal{ReasonBadRequest, "the usages lack server auth"}
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(allowedUsages, u) {
			return nil, &Refusal{ReasonBadRequest, fmt.Sprintf("usage %q: a serving certificate may have only %v", u, allowedUsages)}
		}
	}
	if err := strongKey(req.PublicKey); err != nil {
		return nil, &Refusal{ReasonBadRequest, err.Error()}
	}
	return r, nil
}

// PodIPs checks that every address req asks for is its Pod's: the Pod the
// requester's token is bound to (pod's name and uid), on req's node. Those
// addresses are as its node's kubelet reports them; the reconciler itself
// checks the name alone. A Pod that has no address yet is an error to
// retry, not a Refusal.
func PodIPs(req *Request, pod *corev1.Pod) (*Refusal, error) {
	if string(pod.UID) != req.PodUID || pod.Spec.NodeName != req.Node {
		return &Refusal{ReasonNoNode, fmt.Sprintf("Pod %s (uid %s) is not the requester's on node %s", pod.Name, req.PodUID, req.Node)}, nil
	}
	if len(pod.Status.PodIPs) == 0 {
		return nil, fmt.Errorf("pod %s has no address yet", pod.Name)
	}
	for _, ip := range req.IPs {
		if !slices.ContainsFunc(pod.Status.PodIPs, func(p corev1.PodIP) bool { return net.ParseIP(p.IP).Equal(ip) }) {
			return &Refusal{ReasonBadRequest, fmt.Sprintf("address %s is not one of Pod %s's (%v)", ip, pod.Name, pod.Status.PodIPs)}, nil
		}
	}
	return nil, nil
}

// parseRequest reads the PEM request and checks it is signed by its key.
func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("spec.request holds no PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request is not signed by its key: %w", err)
	}
	return req, nil
}

// strongKey accepts the keys the agents make (ECDSA P-256) and others of
// at least that strength.
func strongKey(key any) error {
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() || k.Curve == elliptic.P521() {
			return nil
		}
		return fmt.Errorf("ECDSA curve %s: want P-256, P-384 or P-521", k.Curve.Params().Name)
	case *rsa.PublicKey:
		if k.N.BitLen() >= 2048 {
			return nil
		}
		return fmt.Errorf("RSA key of %d bits: want at least 2048", k.N.BitLen())
	case ed25519.PublicKey:
		return nil
	default:
		return fmt.Errorf("key type %T not accepted", key)
	}
}

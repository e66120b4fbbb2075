package agentcerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"nodeconfig.io/services/api/v1alpha1"
)

// DefaultLifetime is the longest life of an agent's certificate unless
// Options say otherwise: the agent renews it at 70-90 % of that, so a node
// whose agent is compromised and then cleaned up keeps a certificate for
// a day at most, for one API write per node every 17-22 hours.
const DefaultLifetime = 24 * time.Hour

// Options configure a Signer.
type Options struct {
	Kube kubernetes.Interface
	// AgentNamespace and AgentName are the agents' ServiceAccount, the only
	// requester signed for; their Pods are in that namespace.
	AgentNamespace, AgentName string
	CA                        CA
	// Lifetime is the longest life of a certificate (a request may ask for
	// less); 0 is DefaultLifetime.
	Lifetime time.Duration
	Log      *slog.Logger
}

// Signer approves and signs the agents' requests, and denies the others
// made to its signer, until its Run ends.
type Signer struct {
	o Options
	// agentUser is the agents' ServiceAccount as the API server names a
	// requester.
	agentUser string
	now       func() time.Time
	results   *prometheus.CounterVec
}

// New checks the options; the CA is read once here so a bad file stops
// the start.
func New(o Options) (*Signer, error) {
	if o.AgentNamespace == "" || o.AgentName == "" {
		return nil, errors.New("agent certificates: no agent ServiceAccount to sign for")
	}
	if o.Lifetime == 0 {
		o.Lifetime = DefaultLifetime
	}
	if o.Lifetime < 10*time.Minute {
		return nil, fmt.Errorf("agent certificate lifetime %v: want at least 10m (the API server's least expirationSeconds)", o.Lifetime)
	}
	if err := o.CA.Check(); err != nil {
		return nil, err
	}
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeconfig_agent_certificates_total",
		Help: "Agent serving certificate requests (signer " + v1alpha1.AgentServingSigner + ") by result: issued, denied (not from an agent for its own node), failed (approved by someone else but not fit to sign).",
	}, []string{"result"})
	for _, r := range []string{"issued", "denied", "failed"} {
		results.WithLabelValues(r)
	}
	return &Signer{o: o, agentUser: "system:serviceaccount:" + o.AgentNamespace + ":" + o.AgentName, now: time.Now, results: results}, nil
}

// Register adds the request counts to reg.
func (s *Signer) Register(reg prometheus.Registerer) {
	reg.MustRegister(s.results)
}

// Run watches the requests for the agents' signer and answers each until
// ctx ends.
func (s *Signer) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.o.Kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", v1alpha1.AgentServingSigner).String()
	}))
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "agent-certificates"})
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && pending(csr) {
			queue.Add(csr.Name)
		}
	}
	_, _ = csrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), csrs.Informer().HasSynced) {
		return
	}
	for s.next(ctx, queue, csrs.Lister()) {
	}
}

// next answers one queued request; false once the queue shuts down.
func (s *Signer) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], lister certificateslisters.CertificateSigningRequestLister) bool {
	name, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(name)
	csr, err := lister.Get(name)
	if err != nil { // deleted meanwhile
		queue.Forget(name)
		return true
	}
	if err := s.Answer(ctx, csr); err != nil {
		s.o.Log.Warn("cannot answer an agent certificate request; retrying", "csr", name, "err", err)
		queue.AddRateLimited(name)
		return true
	}
	queue.Forget(name)
	return true
}

// pending reports whether a request still waits for an answer: not
// issued, denied or failed.
func pending(csr *certificatesv1.CertificateSigningRequest) bool {
	return len(csr.Status.Certificate) == 0 && !hasCondition(csr, certificatesv1.CertificateDenied) && !hasCondition(csr, certificatesv1.CertificateFailed)
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Answer approves and signs a fit request (Check) through the approval
// and status subresources, and denies an unfit one; an unfit one someone
// else approved is marked failed, so its requester stops waiting.
// Answered requests are left alone.
func (s *Signer) Answer(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	if csr.Spec.SignerName != v1alpha1.AgentServingSigner || !pending(csr) {
		return nil
	}
	csr = csr.DeepCopy()
	req, refusal, err := s.judge(ctx, csr)
	if err != nil {
		return err
	}
	if refusal != nil {
		return s.refuse(ctx, csr, refusal)
	}
	csrs := s.o.Kube.CertificatesV1().CertificateSigningRequests()
	if !hasCondition(csr, certificatesv1.CertificateApproved) {
		csr.Status.Conditions = append(csr.Status.Conditions, s.condition(certificatesv1.CertificateApproved, ReasonApproved,
			fmt.Sprintf("the agent on node %s asked for its own name", req.Node)))
		if csr, err = csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	life := s.o.Lifetime
	if e := csr.Spec.ExpirationSeconds; e != nil {
		life = min(life, time.Duration(*e)*time.Second)
	}
	if csr.Status.Certificate, err = s.o.CA.Sign(req, s.now(), life); err != nil {
		return err
	}
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return err
	}
	s.results.WithLabelValues("issued").Inc()
	s.o.Log.Info("issued an agent serving certificate", "csr", csr.Name, "node", req.Node, "name", req.Name, "ips", req.IPs, "life", life)
	return nil
}

// judge checks a request (Check), and the addresses it asks for against
// its Pod (PodIPs); an error is one to retry.
func (s *Signer) judge(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (*Request, *Refusal, error) {
	req, refusal := Check(csr, s.agentUser)
	if refusal != nil || len(req.IPs) == 0 {
		return req, refusal, nil
	}
	pod, err := s.o.Kube.CoreV1().Pods(s.o.AgentNamespace).Get(ctx, req.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &Refusal{ReasonNoNode, fmt.Sprintf("the requester's Pod %s/%s is gone", s.o.AgentNamespace, req.Pod)}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	refusal, err = PodIPs(req, pod)
	return req, refusal, err
}

// refuse denies a request, or marks it failed if someone else approved it.
func (s *Signer) refuse(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, refusal *Refusal) error {
	csrs := s.o.Kube.CertificatesV1().CertificateSigningRequests()
	result := "denied"
	var err error
	if hasCondition(csr, certificatesv1.CertificateApproved) {
		result = "failed"
		csr.Status.Conditions = append(csr.Status.Conditions, s.condition(certificatesv1.CertificateFailed, refusal.Reason, refusal.Message))
		_, err = csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{})
	} else {
		csr.Status.Conditions = append(csr.Status.Conditions, s.condition(certificatesv1.CertificateDenied, refusal.Reason, refusal.Message))
		_, err = csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	s.results.WithLabelValues(result).Inc()
	s.o.Log.Warn("refused an agent certificate request", "csr", csr.Name, "requester", csr.Spec.Username, "result", result, "reason", refusal.Reason, "message", refusal.Message)
	return nil
}

func (s *Signer) condition(t certificatesv1.RequestConditionType, reason, message string) certificatesv1.CertificateSigningRequestCondition {
	now := metav1.NewTime(s.now())
	return certificatesv1.CertificateSigningRequestCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastUpdateTime: now, LastTransitionTime: now,
	}
}

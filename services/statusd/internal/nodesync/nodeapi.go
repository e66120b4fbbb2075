package nodesync

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/servekit/kubeapi"
)

// nodeAPI is every call the syncer makes to the API server: its reads and
// patches, and its informer's list and watch.
type nodeAPI interface {
	Get(ctx context.Context, name string) (*corev1.Node, error)
	PatchStatus(ctx context.Context, name string, patch []byte) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ownNodeListWatch lists and watches only the Node named name through api.
// A refused list or watch comes back to the informer's reflector, whose
// own backoff is jittered.
func ownNodeListWatch(api nodeAPI, name string, client kubernetes.Interface) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(kubeapi.OneObject(name, api.List, api.Watch), client)
}

const fieldManager = "nodeconfig-statusd"

// newNodeAPI calls the API server without client-go's own retries. Those
// wait exactly the Retry-After second of a refusal (429) and try again, up
// to ten times in each call, so a fleet refused together comes back
// together, second after second; the syncer backs off itself, with jitter
// (retryDelay). client-go's fake clientset has no REST client (and no
// retries): its typed client is called instead.
func newNodeAPI(c kubernetes.Interface) nodeAPI {
	if rc, ok := c.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		return onceNodes{rc}
	}
	return typedNodes{c}
}

// onceNodes sends each call once, and asks for the Node in protobuf as
// client-go's typed client does (it costs both ends less than JSON).
type onceNodes struct{ c rest.Interface }

func (o onceNodes) Get(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := o.c.Get().UseProtobufAsDefault().Resource("nodes").Name(name).MaxRetries(0).Do(ctx).Into(node)
	return node, err
}

func (o onceNodes) PatchStatus(ctx context.Context, name string, patch []byte) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := o.c.Patch(types.StrategicMergePatchType).UseProtobufAsDefault().Resource("nodes").Name(name).SubResource("status").
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, scheme.ParameterCodec).
		Body(patch).MaxRetries(0).Do(ctx).Into(node)
	return node, err
}

func (o onceNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	list := &corev1.NodeList{}
	err := o.c.Get().UseProtobufAsDefault().Resource("nodes").VersionedParams(&opts, scheme.ParameterCodec).
		Timeout(timeoutOf(opts)).MaxRetries(0).Do(ctx).Into(list)
	return list, err
}

func (o onceNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return o.c.Get().UseProtobufAsDefault().Resource("nodes").VersionedParams(&opts, scheme.ParameterCodec).
		Timeout(timeoutOf(opts)).MaxRetries(0).Watch(ctx)
}

// timeoutOf is the client-side timeout client-go's typed client sets from
// the options' server-side one.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

type typedNodes struct{ c kubernetes.Interface }

func (t typedNodes) Get(ctx context.Context, name string) (*corev1.Node, error) {
	return t.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (t typedNodes) PatchStatus(ctx context.Context, name string, patch []byte) (*corev1.Node, error) {
	return t.c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: fieldManager}, "status")
}

func (t typedNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return t.c.CoreV1().Nodes().List(ctx, opts)
}

func (t typedNodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return t.c.CoreV1().Nodes().Watch(ctx, opts)
}

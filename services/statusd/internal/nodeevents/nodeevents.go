// Package nodeevents tells of the node's own rollbacks in an Event on its
// Node: the agent rolls back by itself (its kubelet unhealthy, a health gate
// failed, the start guard fell back), often while no reconciler runs to say
// so, as when the config under trial evicted it.
package nodeevents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Component names the agent as the Events' source.
const Component = "nodeconfig-agent"

// ownReasons are the late errors the node decides by itself.
var ownReasons = []string{records.ReasonConsumerUnhealthy, records.ReasonHealthGateFailed, records.ReasonStartGuardFellBack, records.ReasonRefusedByPolicy, records.ReasonChangeRefused}

// recent is how old a rollback may be and still be told: an agent that
// starts long after one does not tell it again as news.
const recent = 15 * time.Minute

// maxMessage keeps an Event's message within what every reader shows; the
// Node's condition has the whole of it.
const maxMessage = 1024

// Teller records one Warning Event per rollback of the node.
type Teller struct {
	Client kubernetes.Interface
	Node   string
	Log    *slog.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time

	mu   sync.Mutex
	told string
}

// Observe tells of the records' rollback if it is the node's own, recent,
// and not told yet. An Event's name is the rollback's, so an agent that
// restarts does not tell it twice.
func (t *Teller) Observe(ctx context.Context, recs *nodeconfigv1.Records) {
	e := recs.GetError()
	err := e.GetError()
	if err.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || !slices.Contains(ownReasons, err.GetReason()) || e.GetWrittenAt() == nil {
		return
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	at := e.GetWrittenAt().AsTime()
	if now().Sub(at) > recent {
		return
	}
	sum := sha256.Sum256([]byte(at.UTC().Format(time.RFC3339Nano) + "\x00" + err.GetReason() + "\x00" + err.GetMessage()))
	name := fmt.Sprintf("%s.nodeconfig-%s", t.Node, hex.EncodeToString(sum[:8]))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.told == name {
		return
	}
	ref := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: t.Node}
	if n, getErr := t.Client.CoreV1().Nodes().Get(ctx, t.Node, metav1.GetOptions{}); getErr == nil {
		// kubectl describe finds a Node's Events by its uid.
		ref.UID = n.UID
	}
	message := fmt.Sprintf("the node rolled %s back by itself: %s; it runs %s",
		records.Describe(recs.GetAssigned().GetSource()), err.GetMessage(), records.Describe(recs.GetActive().GetSource()))
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		InvolvedObject:      ref,
		Type:                corev1.EventTypeWarning,
		Reason:              err.GetReason(),
		Message:             message,
		Source:              corev1.EventSource{Component: Component, Host: t.Node},
		FirstTimestamp:      metav1.NewTime(at),
		LastTimestamp:       metav1.NewTime(at),
		Count:               1,
		ReportingController: "nodeconfig.io/agent",
		ReportingInstance:   t.Node,
	}
	if _, createErr := t.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); createErr != nil && !apierrors.IsAlreadyExists(createErr) {
		t.Log.Warn("cannot record the rollback's Event on the Node (the Node's condition says it still)", "err", createErr)
		return
	}
	t.told = name
}

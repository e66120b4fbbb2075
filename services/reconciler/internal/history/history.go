// Package history keeps each version a NodeConfig rolls out as an apps/v1
// ControllerRevision (as DaemonSets keep theirs): in the reconciler's own
// namespace, owned by the NodeConfig, labelled with its name and numbered
// 1, 2, 3... A revision holds the payload's bytes, so that it can be rolled
// out again (spec.source.revision) after its ConfigMap was edited or
// deleted. Its annotations say when its latest rollout started and how
// that rollout went.
package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"
	"k8s.io/utils/ptr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// DefaultLimit is how many revisions a NodeConfig keeps by default, as a
// Deployment's revisionHistoryLimit.
const DefaultLimit = 10

// Store reads the revisions from an informer's cache, overlaid with its
// own writes until the cache shows them (a NodeConfig synced again at
// once must not write the same revision twice), and writes them through
// the API server. One goroutine writes at a time (the NodeConfig queue's
// worker).
type Store struct {
	client    appsv1client.ControllerRevisionsGetter
	cache     cache.MutationCache
	namespace string
	limit     int
	now       func() time.Time
	// decoded holds revisions' data decoded and checked, by uid (a
	// revision's data never changes): every node sync of a pinned
	// NodeConfig reads it.
	decoded *lru.Cache
	// pruned are the revisions the store deleted, by name (never reused), and when: the
	// overlay of its own writes would show those it created for a while.
	pruned map[string]time.Time
}

// ownWritesKept is how long the store's own writes overlay the cache: far
// longer than a watch event takes.
const ownWritesKept = time.Minute

// decodedKept bounds the decoded revisions kept: those pinned at a time
// are few.
const decodedKept = 32

// Pinned is a revision as the nodes get it: their source, and the data
// holding its payload under its key.
type Pinned struct {
	Revision *appsv1.ControllerRevision
	Data     v1alpha1.RevisionData
	Source   *nodeconfigv1.ConfigSource
	// NodeData is shared: callers must not change it.
	NodeData map[string]string
}

// New is a store of the revisions in namespace, cached in indexer (the
// ControllerRevisions informer's, with its namespace index), each
// NodeConfig keeping limit of them: the current and the pinned one are
// always kept.
func New(client appsv1client.ControllerRevisionsGetter, indexer cache.Indexer, namespace string, limit int, now func() time.Time) *Store {
	return &Store{client: client, namespace: namespace, limit: limit, now: now, pruned: map[string]time.Time{}, decoded: lru.New(decodedKept),
		cache: cache.NewIntegerResourceVersionMutationCache(klog.Background(), indexer, indexer, ownWritesKept, true)}
}

// Of lists nc's revisions from the cache, by number.
func (s *Store) Of(nc *v1alpha1.NodeConfig) ([]*appsv1.ControllerRevision, error) {
	objs, err := s.cache.ByIndex(cache.NamespaceIndex, s.namespace)
	if err != nil {
		return nil, err
	}
	for name, at := range s.pruned {
		if s.now().Sub(at) > ownWritesKept {
			delete(s.pruned, name)
		}
	}
	var revs []*appsv1.ControllerRevision
	for _, obj := range objs {
		if cr, ok := obj.(*appsv1.ControllerRevision); ok && v1alpha1.RevisionOf(cr, nc) && s.pruned[cr.Name].IsZero() {
			revs = append(revs, cr)
		}
	}
	slices.SortFunc(revs, func(a, b *appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	return revs, nil
}

// ErrNoRevision: the NodeConfig's history holds no revision of that number.
var ErrNoRevision = errors.New("no such revision in the NodeConfig's history")

// Get returns revision n of nc, with its data checked against its digest.
func (s *Store) Get(nc *v1alpha1.NodeConfig, n int64) (*Pinned, error) {
	revs, err := s.Of(nc)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(revs, func(cr *appsv1.ControllerRevision) bool { return cr.Revision == n })
	if i < 0 {
		return nil, fmt.Errorf("revision %d of NodeConfig %s: %w (kubectl nodeconfig history %s lists those kept)", n, nc.Name, ErrNoRevision, nc.Name)
	}
	cr := revs[i]
	if p, ok := s.decoded.Get(cr.UID); ok {
		// The data is the revision's for good; its annotations move.
		fresh := *p.(*Pinned)
		fresh.Revision = cr
		return &fresh, nil
	}
	d, err := v1alpha1.DecodeRevision(cr)
	if err != nil {
		return nil, err
	}
	src := NodeSource(cr, d)
	p := &Pinned{Revision: cr, Data: d, Source: src, NodeData: map[string]string{src.Key: string(d.Payload)}}
	s.decoded.Add(cr.UID, p)
	return p, nil
}

// NodeSource is the version the nodes are given for revision cr: named by
// the revision's own uid and number, not by the ConfigMap version it was
// read from, whose checkpoint on a node may hold the whole ConfigMap (a
// different digest under the same uid/resourceVersion, which the node
// refuses). Stable for the revision's life: its annotations change, its
// uid and number do not.
func NodeSource(cr *appsv1.ControllerRevision, d v1alpha1.RevisionData) *nodeconfigv1.ConfigSource {
	return &nodeconfigv1.ConfigSource{Namespace: cr.Namespace, Name: cr.Name, Uid: string(cr.UID),
		ResourceVersion: "revision-" + strconv.FormatInt(cr.Revision, 10), Key: d.Source.Key}
}

// Rollout is what a NodeConfig rolls out now, and how that goes.
type Rollout struct {
	// Pinned is spec.source.revision; 0 while the ConfigMap is followed.
	Pinned int64
	// Payload and Source are the ConfigMap version followed (Pinned 0).
	Payload []byte
	Source  v1alpha1.RevisionSource
	// Outcome is how the rollout goes so far (v1alpha1.Outcome...).
	Outcome string
	// Promoted says whether the revision that was current reached every
	// node before this one replaced it (nil: it did not): its end may
	// not have been noted yet when the next version comes.
	Promoted func(*Pinned) bool
}

// Record keeps nc's history in step with r: the version rolled out is a
// revision (created for a new ConfigMap version), the current one (its
// rollout's start is noted when it becomes current; a revision left while
// rolling out is superseded), with r's outcome; revisions beyond the limit
// are pruned, oldest first.
func (s *Store) Record(ctx context.Context, nc *v1alpha1.NodeConfig, r Rollout) error {
	revs, err := s.Of(nc)
	if err != nil {
		return err
	}
	var target *appsv1.ControllerRevision
	if r.Pinned > 0 {
		if i := slices.IndexFunc(revs, func(cr *appsv1.ControllerRevision) bool { return cr.Revision == r.Pinned }); i >= 0 {
			target = revs[i]
		} else {
			// The nodes report it missing; nothing to note.
			return nil
		}
	} else {
		target = latestOf(revs, r.Source)
	}
	cur := v1alpha1.CurrentRevision(revs)
	now := s.now().UTC().Format(time.RFC3339Nano)
	if target == nil {
		created, err := s.create(ctx, nc, nextNumber(revs), r, now)
		if err != nil {
			return err
		}
		revs = append(revs, created)
		target = created
	} else if target != cur {
		if err := s.annotate(ctx, target, now, r.Outcome); err != nil {
			return err
		}
	} else if next := nextOutcome(target.Annotations[v1alpha1.AnnotationRolloutOutcome], r.Outcome); next != target.Annotations[v1alpha1.AnnotationRolloutOutcome] {
		if err := s.annotate(ctx, target, "", next); err != nil {
			return err
		}
	}
	if cur != nil && cur != target && cur.Annotations[v1alpha1.AnnotationRolloutOutcome] == v1alpha1.OutcomeRollingOut {
		ended := v1alpha1.OutcomeSuperseded
		if p, err := s.Get(nc, cur.Revision); err == nil && r.Promoted != nil && r.Promoted(p) {
			ended = v1alpha1.OutcomePromoted
		}
		if err := s.annotate(ctx, cur, "", ended); err != nil {
			return err
		}
	}
	return s.prune(ctx, revs, target.Revision, r.Pinned)
}

// nextOutcome is the outcome a current revision takes: promoted
// everywhere is how it ended, whatever comes later (a node added, a
// rollback on a node since).
func nextOutcome(had, now string) string {
	if had == v1alpha1.OutcomePromoted {
		return had
	}
	return now
}

// latestOf is the newest revision read from source (a ConfigMap version,
// whose content never changes), nil if none was.
func latestOf(revs []*appsv1.ControllerRevision, source v1alpha1.RevisionSource) *appsv1.ControllerRevision {
	for _, cr := range slices.Backward(revs) {
		if cr.Annotations[v1alpha1.AnnotationRevisionOf] == source.Version() {
			return cr
		}
	}
	return nil
}

// nextNumber follows the highest number kept.
func nextNumber(revs []*appsv1.ControllerRevision) int64 {
	if len(revs) == 0 {
		return 1
	}
	return revs[len(revs)-1].Revision + 1
}

// Name is revision n's object name: the NodeConfig's name and a hash of
// its uid and n, so that a retried create (or one from a cache that lags
// its own write) finds the object, and a NodeConfig recreated under the
// same name never meets its predecessor's revisions.
func Name(nc *v1alpha1.NodeConfig, n int64) string {
	sum := sha256.Sum256([]byte(string(nc.UID) + "/" + strconv.FormatInt(n, 10)))
	prefix := nc.Name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// ErrCacheBehind: a revision of that number exists that the cache does not
// show yet; the NodeConfig is synced again once it does.
var ErrCacheBehind = errors.New("the revision exists but the cache does not show it yet")

func (s *Store) create(ctx context.Context, nc *v1alpha1.NodeConfig, n int64, r Rollout, started string) (*appsv1.ControllerRevision, error) {
	raw, err := json.Marshal(v1alpha1.NewRevisionData(r.Payload, r.Source))
	if err != nil {
		return nil, err
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: Name(nc, n), Namespace: s.namespace,
			Labels: map[string]string{v1alpha1.LabelHistoryOf: nc.Name},
			Annotations: map[string]string{
				v1alpha1.AnnotationRolloutStarted: started, v1alpha1.AnnotationRolloutOutcome: r.Outcome, v1alpha1.AnnotationRevisionOf: r.Source.Version(),
			},
			// Deleting the NodeConfig removes its history (the garbage
			// collector): a namespaced dependent of a cluster-scoped owner.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeConfig", Name: nc.Name, UID: nc.UID, Controller: ptr.To(true),
			}},
		},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: n,
	}
	created, err := s.client.ControllerRevisions(s.namespace).Create(ctx, cr, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("revision %d of NodeConfig %s: %w", n, nc.Name, ErrCacheBehind)
	}
	if err != nil {
		return nil, fmt.Errorf("create revision %d of NodeConfig %s: %w", n, nc.Name, err)
	}
	s.cache.Mutation(created)
	return created, nil
}

// annotate sets cr's outcome, and its rollout's start unless started is
// empty.
func (s *Store) annotate(ctx context.Context, cr *appsv1.ControllerRevision, started, outcome string) error {
	annotations := map[string]any{v1alpha1.AnnotationRolloutOutcome: outcome}
	if started != "" {
		annotations[v1alpha1.AnnotationRolloutStarted] = started
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	patched, err := s.client.ControllerRevisions(cr.Namespace).Patch(ctx, cr.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotate revision %d (%s): %w", cr.Revision, cr.Name, err)
	}
	if err == nil {
		s.cache.Mutation(patched)
	}
	return nil
}

// prune deletes the oldest revisions beyond the limit, never the current
// nor the pinned one.
func (s *Store) prune(ctx context.Context, revs []*appsv1.ControllerRevision, current, pinned int64) error {
	for _, cr := range Prunable(revs, s.limit, current, pinned) {
		err := s.client.ControllerRevisions(cr.Namespace).Delete(ctx, cr.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cr.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("prune revision %d (%s): %w", cr.Revision, cr.Name, err)
		}
		s.pruned[cr.Name] = s.now()
	}
	return nil
}

// Prunable are the revisions of revs (by number) beyond limit, oldest
// first, sparing keep.
func Prunable(revs []*appsv1.ControllerRevision, limit int, keep ...int64) []*appsv1.ControllerRevision {
	excess := len(revs) - max(limit, 0)
	var out []*appsv1.ControllerRevision
	for _, cr := range revs {
		if excess <= 0 {
			break
		}
		if slices.Contains(keep, cr.Revision) {
			continue
		}
		out = append(out, cr)
		excess--
	}
	return out
}

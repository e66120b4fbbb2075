// Package history reads a NodeConfig's revisions (the ControllerRevisions
// the reconciler keeps in its namespace, one per version rolled out),
// prints them as kubectl rollout history does, and picks the revision an
// undo rolls out.
package history

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"nodeconfig.io/services/api/v1alpha1"
)

// Revision is one entry of the history; its JSON is `-o json`.
type Revision struct {
	Revision int64 `json:"revision"`
	// SHA256 is the payload's digest (hex).
	SHA256 string                  `json:"sha256"`
	Source v1alpha1.RevisionSource `json:"source"`
	// Started is when the revision's latest rollout started.
	Started *time.Time `json:"started,omitempty"`
	Outcome string     `json:"outcome"`
	// Current: its rollout started last; Pinned: spec.source.revision
	// names it.
	Current bool `json:"current"`
	Pinned  bool `json:"pinned"`
	// Error says why the revision's data cannot be read (it is then never
	// rolled out).
	Error string `json:"error,omitempty"`
}

// List reads nc's revisions in namespace, by number.
func List(ctx context.Context, kube kubernetes.Interface, namespace string, nc *v1alpha1.NodeConfig) ([]Revision, error) {
	list, err := kube.AppsV1().ControllerRevisions(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{v1alpha1.LabelHistoryOf: nc.Name}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the revisions of NodeConfig %s in namespace %s: %w", nc.Name, namespace, err)
	}
	var crs []*appsv1.ControllerRevision
	for i := range list.Items {
		if v1alpha1.RevisionOf(&list.Items[i], nc) {
			crs = append(crs, &list.Items[i])
		}
	}
	slices.SortFunc(crs, func(a, b *appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	cur := v1alpha1.CurrentRevision(crs)
	var pinned int64
	if nc.Spec.Source != nil && nc.Spec.Source.Revision != nil {
		pinned = *nc.Spec.Source.Revision
	}
	out := make([]Revision, 0, len(crs))
	for _, cr := range crs {
		r := Revision{Revision: cr.Revision, Outcome: cr.Annotations[v1alpha1.AnnotationRolloutOutcome], Current: cr == cur, Pinned: cr.Revision == pinned}
		if t := v1alpha1.RevisionStarted(cr); !t.IsZero() {
			r.Started = &t
		}
		if d, err := v1alpha1.DecodeRevision(cr); err != nil {
			r.Error = err.Error()
		} else {
			r.SHA256, r.Source = d.SHA256, d.Source
		}
		out = append(out, r)
	}
	return out, nil
}

// UndoTarget is the revision an undo rolls out: to, which must be kept,
// or with to 0 the one numbered below the current one.
func UndoTarget(name string, revs []Revision, to int64) (int64, error) {
	if len(revs) == 0 {
		return 0, fmt.Errorf("NodeConfig %s has no history yet: nothing to undo", name)
	}
	if to != 0 {
		i := slices.IndexFunc(revs, func(r Revision) bool { return r.Revision == to })
		if i < 0 {
			return 0, fmt.Errorf("NodeConfig %s has no revision %d (kept: %s); nothing changed", name, to, numbers(revs))
		}
		if revs[i].Error != "" {
			return 0, fmt.Errorf("NodeConfig %s: revision %d cannot be read: %s; nothing changed", name, to, revs[i].Error)
		}
		return to, nil
	}
	cur := slices.IndexFunc(revs, func(r Revision) bool { return r.Current })
	if cur <= 0 {
		return 0, fmt.Errorf("NodeConfig %s has no revision before its current one (kept: %s); nothing changed", name, numbers(revs))
	}
	return revs[cur-1].Revision, nil
}

func numbers(revs []Revision) string {
	s := make([]string, 0, len(revs))
	for _, r := range revs {
		s = append(s, strconv.FormatInt(r.Revision, 10))
	}
	return strings.Join(s, ", ")
}

// Text prints the history as a table, the current revision marked.
func Text(w io.Writer, name string, revs []Revision) error {
	if len(revs) == 0 {
		_, err := fmt.Fprintf(w, "NodeConfig %s has no revisions yet.\n", name)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tDIGEST\tSOURCE\tSTARTED\tOUTCOME")
	for _, r := range revs {
		digest, source := r.SHA256, r.Source.String()
		if len(digest) > 12 {
			digest = digest[:12]
		}
		if r.Error != "" {
			digest, source = "?", "unreadable: "+r.Error
		}
		started := "-"
		if r.Started != nil {
			started = r.Started.UTC().Format(time.RFC3339)
		}
		outcome := r.Outcome
		if r.Current {
			outcome += " (current)"
		}
		if r.Pinned {
			outcome += " (pinned)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Revision, digest, source, started, outcome)
	}
	return tw.Flush()
}

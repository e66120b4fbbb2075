// Package reports keeps the latest conditions each external component
// reported to statusd, in a small state file that survives a restart.
package reports

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/servekit/atomicfile"
)

// ErrInvalid marks a report that was refused; nothing was changed.
var ErrInvalid = errors.New("invalid report")

// Reserved condition types belong to the kubelet or to statusd itself.
var Reserved = map[string]bool{
	string(corev1.NodeReady): true, string(corev1.NodeMemoryPressure): true, string(corev1.NodeDiskPressure): true,
	string(corev1.NodePIDPressure): true, string(corev1.NodeNetworkUnavailable): true, v1alpha1.NodeConditionConfigReady: true,
}

// MaxReporters caps distinct reporter names so a caller cannot grow the
// state file without bound.
const MaxReporters = 64

// Report is one reporter's latest output and every type it ever owned.
type Report struct {
	Conditions []metav1.Condition `json:"conditions"`
	Owned      []string           `json:"owned"`
}

// Store holds the reports, persisted to a JSON file.
type Store struct {
	path string
	mu   sync.Mutex
	by   map[string]*Report
}

// Open loads the state file (a missing file is an empty store).
func Open(path string) (*Store, error) {
	s := &Store{path: path, by: map[string]*Report{}}
	atomicfile.CleanTemps(path)
	buf, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read reports state %s: %w", path, err)
	}
	if err := json.Unmarshal(buf, &s.by); err != nil {
		return nil, fmt.Errorf("reports state %s is not valid JSON (%v); move it aside to start empty", path, err)
	}
	return s, nil
}

// Put validates and stores a report. now stamps new transitions.
func (s *Store) Put(name string, conds []metav1.Condition, now time.Time) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return fmt.Errorf("%w: name %q: %s", ErrInvalid, name, strings.Join(msgs, "; "))
	}
	seen := map[string]bool{}
	for i := range conds {
		c := &conds[i]
		if Reserved[c.Type] {
			return fmt.Errorf("%w: condition type %q is owned by the kubelet or statusd", ErrInvalid, c.Type)
		}
		if seen[c.Type] {
			return fmt.Errorf("%w: condition type %q appears twice", ErrInvalid, c.Type)
		}
		seen[c.Type] = true
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = metav1.NewTime(now)
		}
	}
	if errs := metav1validation.ValidateConditions(conds, field.NewPath("conditions")); len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, errs.ToAggregate().Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, r := range s.by {
		if other == name {
			continue
		}
		for _, t := range r.Owned {
			if seen[t] {
				return fmt.Errorf("%w: condition type %q is owned by reporter %q", ErrInvalid, t, other)
			}
		}
	}
	prev := s.by[name]
	if prev == nil && len(s.by) >= MaxReporters {
		return fmt.Errorf("%w: already %d reporters; reuse a name", ErrInvalid, MaxReporters)
	}
	next := &Report{Conditions: conds}
	owned := map[string]bool{}
	if prev != nil {
		for _, t := range prev.Owned {
			owned[t] = true
		}
	}
	for t := range seen {
		owned[t] = true
	}
	for t := range owned {
		next.Owned = append(next.Owned, t)
	}
	sort.Strings(next.Owned)
	s.by[name] = next
	if err := s.saveLocked(); err != nil {
		s.by[name] = prev
		if prev == nil {
			delete(s.by, name)
		}
		return err
	}
	return nil
}

// Names lists reporters in order.
func (s *Store) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.by))
	for n := range s.by {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Conditions returns a reporter's wanted conditions and the types it owned
// but no longer reports.
func (s *Store) Conditions(name string) (want []metav1.Condition, dropped []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.by[name]
	if r == nil {
		return nil, nil
	}
	current := map[string]bool{}
	for _, c := range r.Conditions {
		current[c.Type] = true
	}
	for _, t := range r.Owned {
		if !current[t] {
			dropped = append(dropped, t)
		}
	}
	return append([]metav1.Condition(nil), r.Conditions...), dropped
}

func (s *Store) saveLocked() error {
	buf, err := json.MarshalIndent(s.by, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.path, buf, 0o600, 0o700); err != nil {
		return fmt.Errorf("save reports: %w", err)
	}
	return nil
}

package reports

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cond(typ, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "m"}
}

func TestPutRejectsMalformedAndReservedConditions(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, tc := range map[string]struct {
		reporter string
		conds    []metav1.Condition
		contains string
	}{
		"bad name":          {"Bad Name", []metav1.Condition{cond("KernelOK", "Ok")}, "name"},
		"reserved type":     {"gpu", []metav1.Condition{cond("Ready", "Ok")}, "owned by the kubelet or statusd"},
		"our own type":      {"gpu", []metav1.Condition{cond("NodeConfigReady", "Ok")}, "owned by"},
		"reason not camel":  {"gpu", []metav1.Condition{cond("GPUHealthy", "not ok")}, "reason"},
		"empty reason":      {"gpu", []metav1.Condition{cond("GPUHealthy", "")}, "reason"},
		"bad type":          {"gpu", []metav1.Condition{cond("bad type!", "Ok")}, "type"},
		"duplicate":         {"gpu", []metav1.Condition{cond("GPUHealthy", "Ok"), cond("GPUHealthy", "Ok")}, "twice"},
		"status not a enum": {"gpu", []metav1.Condition{{Type: "GPUHealthy", Status: "Maybe", Reason: "Ok"}}, "status"},
	} {
		t.Run(name, func(t *testing.T) {
			err := s.Put(tc.reporter, tc.conds, now)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.contains)
			}
		})
	}
	if len(s.Names()) != 0 {
		t.Fatalf("a refused report was kept: %v", s.Names())
	}
}

func TestReportsSurviveRestartAndTrackDroppedTypes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	s, _ := Open(path)
	if err := s.Put("gpu", []metav1.Condition{cond("GPUHealthy", "Ok"), cond("GPUDriver", "Loaded")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("other", []metav1.Condition{cond("GPUHealthy", "Ok")}, time.Now()); err == nil {
		t.Fatal("a second reporter took a type the first owns")
	}
	if err := s.Put("gpu", []metav1.Condition{cond("GPUHealthy", "Ok")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want, dropped := s2.Conditions("gpu")
	if len(want) != 1 || want[0].Type != "GPUHealthy" || len(dropped) != 1 || dropped[0] != "GPUDriver" {
		t.Fatalf("after restart: want %v dropped %v", want, dropped)
	}
}

package v1alpha1

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// jsonShape describes how encoding/json sees t: the JSON kind and, for
// objects, each field's name and whether it is omitted when empty.
func jsonShape(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonShape(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "[" + jsonShape(t.Elem()) + "]"
	case reflect.Map:
		return "map[" + jsonShape(t.Key()) + "]" + jsonShape(t.Elem())
	case reflect.Struct:
		var fields []string
		for i := range t.NumField() {
			f := t.Field(i)
			fields = append(fields, f.Tag.Get("json")+" "+jsonShape(f.Type))
		}
		return "{" + strings.Join(fields, "; ") + "}"
	default:
		return t.Kind().String()
	}
}

// The CRD's schema of spec.nodeSelector is generated from labelSelector
// (selector.go): it must describe exactly the JSON of metav1.LabelSelector,
// the Go type of the field.
func TestLabelSelectorSchemaMatchesMetav1(t *testing.T) {
	got := jsonShape(reflect.TypeFor[labelSelector]())
	want := jsonShape(reflect.TypeFor[metav1.LabelSelector]())
	if got != want {
		t.Fatalf("labelSelector no longer has the JSON shape of metav1.LabelSelector:\n got  %s\n want %s", got, want)
	}
	if reflect.TypeFor[LabelSelector]() != reflect.TypeFor[metav1.LabelSelector]() {
		t.Fatal("LabelSelector is not metav1.LabelSelector in a build without the crdschema tag")
	}
}

// markers reads selector.go: the value of each kubebuilder marker, by the
// declaration it is on ("Key", "Operator", "labelValue", "MatchLabels").
func markers(t *testing.T) map[string]map[string]string {
	t.Helper()
	src, err := os.ReadFile("selector.go")
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]map[string]string{}
	pending := map[string]string{}
	for line := range strings.Lines(string(src)) {
		line = strings.TrimSpace(line)
		if m, ok := strings.CutPrefix(line, "// +kubebuilder:validation:"); ok {
			name, value, _ := strings.Cut(m, "=")
			pending[name] = value
			continue
		}
		if strings.HasPrefix(line, "//") || line == "" {
			continue
		}
		decl := strings.Fields(strings.TrimPrefix(line, "type "))[0]
		all[decl], pending = pending, map[string]string{}
	}
	return all
}

func unquote(t *testing.T, s string) string {
	t.Helper()
	if len(s) < 2 || s[0] != '`' || s[len(s)-1] != '`' {
		t.Fatalf("marker value %s is not a raw string", s)
	}
	return s[1 : len(s)-1]
}

// The CRD refuses the label keys, values and operators that parsing a
// metav1.LabelSelector refuses, and accepts the ones it accepts.
func TestLabelSelectorSchemaRefusesWhatMetav1Refuses(t *testing.T) {
	m := markers(t)
	key := regexp.MustCompile(unquote(t, m["Key"]["Pattern"]))
	value := regexp.MustCompile(unquote(t, m["labelValue"]["Pattern"]))
	// The matchLabels keys are checked by a CEL rule (a map's keys have no
	// schema): its regular expression is the key pattern, CEL-quoted.
	rule := m["MatchLabels"]["XValidation:rule"]
	if !strings.Contains(rule, strings.ReplaceAll(key.String(), `\`, `\\`)) {
		t.Errorf("the matchLabels rule %s does not check the key pattern %s", rule, key)
	}
	parses := func(r metav1.LabelSelectorRequirement) bool {
		_, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{r}})
		return err == nil
	}
	for _, k := range []string{"a", "pool", "kubernetes.io/hostname", "a.b-c/D_e.f", "x" + strings.Repeat("y", 62),
		"a b", "-a", "a-", "a/", "/a", "Example.com/a", "a/b/c", "x" + strings.Repeat("y", 63), ""} {
		if got, want := key.MatchString(k), parses(metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpExists}); got != want {
			t.Errorf("label key %q: the CRD accepts it: %v, metav1 parses it: %v", k, got, want)
		}
	}
	for _, v := range []string{"", "a", "a.b_c-d", strings.Repeat("v", 63), "a b", "-a", "a.", "ä"} {
		if got, want := value.MatchString(v), parses(metav1.LabelSelectorRequirement{Key: "k", Operator: metav1.LabelSelectorOpIn, Values: []string{v}}); got != want {
			t.Errorf("label value %q: the CRD accepts it: %v, metav1 parses it: %v", v, got, want)
		}
	}
	if !strings.Contains(m["labelValue"]["MaxLength"], "63") || parses(metav1.LabelSelectorRequirement{Key: "k", Operator: metav1.LabelSelectorOpIn, Values: []string{strings.Repeat("v", 64)}}) {
		t.Error("label values are at most 63 characters in both")
	}
	enum := strings.Split(m["Operator"]["Enum"], ";")
	for _, op := range enum {
		r := metav1.LabelSelectorRequirement{Key: "k", Operator: metav1.LabelSelectorOperator(op)}
		if op == "In" || op == "NotIn" {
			r.Values = []string{"v"}
		}
		if !parses(r) {
			t.Errorf("operator %s: the CRD accepts it, metav1 does not parse it", op)
		}
	}
	if want := []string{"In", "NotIn", "Exists", "DoesNotExist"}; !reflect.DeepEqual(enum, want) {
		t.Errorf("the CRD's operators are %v, metav1's %v", enum, want)
	}
}

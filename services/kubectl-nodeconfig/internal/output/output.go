// Package output prints a command's result as kubectl prints objects: as
// the command's own text by default, or through k8s.io/cli-runtime's
// printers: -o json|yaml|kyaml, -o name, -o jsonpath=..., -o
// go-template=..., and -o wide where the command has a table.
package output

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// GroupVersion is the apiVersion of what the structured outputs print: the
// plugin's reports, which the API server does not serve.
var GroupVersion = schema.GroupVersion{Group: "plugin.nodeconfig.io", Version: "v1alpha1"}

// Text is the default format, the command's own.
const Text = "text"

// Flags are a command's -o and the template flags that go with it.
type Flags struct {
	print *genericclioptions.PrintFlags
	// wide is whether the command has a table for -o wide.
	wide bool
}

// NewFlags returns the flags of a command; wide says whether it offers -o
// wide.
func NewFlags(wide bool) *Flags {
	return &Flags{print: genericclioptions.NewPrintFlags("").WithDefaultOutput(Text), wide: wide}
}

// AddFlags adds -o (with its completion) and the template flags to cmd.
func (f *Flags) AddFlags(cmd *cobra.Command) {
	f.print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "output format: " + strings.Join(f.Formats(), ", ")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return f.Formats(), cobra.ShellCompDirectiveNoFileComp
	})
}

// Formats are the -o values the command takes.
func (f *Flags) Formats() []string {
	out := []string{Text}
	if f.wide {
		out = append(out, "wide")
	}
	for _, a := range f.print.AllowedFormats() {
		// The template formats take their template after "=".
		if slices.Contains([]string{"jsonpath", "jsonpath-as-json", "go-template"}, a) {
			a += "="
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func (f *Flags) format() string { return *f.print.OutputFormat }

// IsText says whether the command prints its own text.
func (f *Flags) IsText() bool { return f.format() == "" || f.format() == Text }

// IsWide says whether the command prints its table with every column.
func (f *Flags) IsWide() bool { return f.wide && f.format() == "wide" }

// IsName says whether the command prints resource/name lines.
func (f *Flags) IsName() bool { return f.format() == "name" }

// Validate says why -o names no format the command has.
func (f *Flags) Validate() error {
	if f.IsText() || f.IsWide() {
		return nil
	}
	if _, err := f.print.ToPrinter(); err != nil {
		if genericclioptions.IsNoCompatiblePrinterError(err) {
			return fmt.Errorf("-o %q: want one of %s", f.format(), strings.Join(f.Formats(), ", "))
		}
		return err
	}
	return nil
}

// Ref names an object for -o name.
type Ref struct {
	schema.GroupKind
	Name string
}

// Result is what a command prints.
type Result struct {
	// Kind and Value are the object the structured outputs print: Value's
	// fields by their JSON names, with apiVersion GroupVersion and this
	// kind.
	Kind  string
	Value any
	// Names are what -o name prints, one resource/name line each.
	Names []Ref
	// Text prints the command's own text.
	Text func(io.Writer) error
	// Table is what -o wide prints; nil when the command has no table.
	Table func() *metav1.Table
}

// Print prints r in the chosen format.
func (f *Flags) Print(w io.Writer, r Result) error {
	switch {
	case f.IsText():
		return r.Text(w)
	case f.IsWide():
		return printers.NewTablePrinter(printers.PrintOptions{Wide: true}).PrintObj(r.Table(), w)
	}
	p, err := f.print.ToPrinter()
	if err != nil {
		return err
	}
	if f.IsName() {
		for _, ref := range r.Names {
			obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}}
			obj.SetGroupVersionKind(ref.WithVersion("v1"))
			if err := p.PrintObj(obj, w); err != nil {
				return err
			}
		}
		return nil
	}
	obj, err := Object(r.Kind, r.Value)
	if err != nil {
		return err
	}
	return p.PrintObj(obj, w)
}

// Object is v as an object of kind in GroupVersion: its fields by their
// JSON names, beside apiVersion and kind.
func Object(kind string, v any) (*unstructured.Unstructured, error) {
	// The converter takes a pointer; through the interface it reaches the
	// struct, a value or a pointer.
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(GroupVersion.WithKind(kind))
	return u, nil
}

package intern

import (
	"strings"
	"testing"
	"unsafe"
)

func TestGetReturnsOneCopyOfEqualStrings(t *testing.T) {
	i := New(4)
	first := i.Get(strings.Repeat("config", 3))
	again := i.Get(strings.Repeat("config", 3)) // equal, built apart
	if again != first || unsafe.StringData(again) != unsafe.StringData(first) {
		t.Fatal("two equal strings came back as two copies")
	}
}

func TestAForgottenStringIsKeptAnew(t *testing.T) {
	i := New(1)
	a := i.Get(strings.Repeat("a", 2))
	i.Get("b") // evicts "aa"
	if got := i.Get(strings.Repeat("a", 2)); got != a {
		t.Fatalf("got %q, want %q", got, a)
	}
}

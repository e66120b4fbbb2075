package crash

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// payloadBytes is the size of every version's config. It is large enough
// that writing it takes a while (a kill can land inside the write) and far
// below the 1 MiB ConfigMap limit.
const payloadBytes = 128 << 10

// lineBytes is the width of every line of a payload. Every line names its
// version, so any page of the file says which version it came from.
const lineBytes = 64

// payloadFor is version v's config: "version: v", then comment lines that
// each carry v and their own number, then "end: v". A file that mixes two
// versions, or stops early, or repeats a stretch, differs from every
// payloadFor, and whatVersions says what it holds.
func payloadFor(v int) string {
	var b strings.Builder
	b.Grow(payloadBytes)
	head, tail := fmt.Sprintf("version: %d\n", v), fmt.Sprintf("end: %d\n", v)
	b.WriteString(head)
	for i := 0; b.Len()+lineBytes <= payloadBytes-len(tail); i++ {
		line := fmt.Sprintf("# v%010d line %07d ", v, i)
		b.WriteString(line)
		b.WriteString(strings.Repeat(".", lineBytes-len(line)-1))
		b.WriteByte('\n')
	}
	// Every payload is exactly payloadBytes, so no length tells versions apart.
	if gap := payloadBytes - len(tail) - b.Len(); gap > 0 {
		b.WriteString(strings.Repeat("#", gap-1) + "\n")
	}
	b.WriteString(tail)
	return b.String()
}

// fileState is what a target file read from disk holds.
type fileState struct {
	exists  bool
	version int    // the whole payload of this version (when whole)
	whole   bool   // exactly payloadFor(version)
	detail  string // for a file that is not whole: what is in it
}

func (f fileState) String() string {
	switch {
	case !f.exists:
		return "no file"
	case f.whole:
		return fmt.Sprintf("the whole payload of version %d", f.version)
	default:
		return f.detail
	}
}

// identify says whether content is exactly one version's payload, and if
// not, what it holds: its size and the versions its lines name.
func identify(content []byte) fileState {
	first, _, _ := bytes.Cut(content, []byte("\n"))
	if v, err := strconv.Atoi(strings.TrimPrefix(string(first), "version: ")); err == nil && bytes.Equal(content, []byte(payloadFor(v))) {
		return fileState{exists: true, version: v, whole: true}
	}
	return fileState{exists: true, detail: fmt.Sprintf("a torn or mixed file: %d bytes (a payload has %d), first line %q, lines of versions %v",
		len(content), payloadBytes, truncate(string(first), 40), whatVersions(content))}
}

// whatVersions lists the versions the comment lines of content name.
func whatVersions(content []byte) []int {
	var vs []int
	for line := range bytes.Lines(content) {
		rest, ok := bytes.CutPrefix(line, []byte("# v"))
		if !ok || len(rest) < 10 {
			continue
		}
		if v, err := strconv.Atoi(string(rest[:10])); err == nil && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// The payloads make every torn or mixed file recognisable, including the
// mixes that share a length and a prefix.
func TestTornAndMixedPayloadsAreRecognised(t *testing.T) {
	old, new := []byte(payloadFor(7)), []byte(payloadFor(17))
	if len(old) != payloadBytes || len(new) != payloadBytes {
		t.Fatalf("payloads are %d and %d bytes, want %d", len(old), len(new), payloadBytes)
	}
	if got := identify(new); !got.whole || got.version != 17 {
		t.Fatalf("a whole payload: %v", got)
	}
	mixed := func(cut int) []byte { return append(append([]byte{}, new[:cut]...), old[cut:]...) }
	for name, content := range map[string][]byte{
		"empty (truncated, not yet written)": {},
		"new cut at a page":                  new[:4096],
		"new cut mid-line":                   new[:payloadBytes-100],
		"new head, old tail at a page":       mixed(8192),
		"new head, old tail near the end":    mixed(payloadBytes - 70),
		"old head, new tail":                 append(append([]byte{}, old[:4096]...), new[4096:]...),
		"new with a stretch of zeros":        append(append(append([]byte{}, new[:4096]...), make([]byte, 4096)...), new[8192:]...),
		"new, one byte short":                new[:payloadBytes-1],
	} {
		if got := identify(content); got.whole {
			t.Errorf("%s: identified as %v", name, got)
		}
	}
	if got := whatVersions(mixed(8192)); !slices.Equal(got, []int{7, 17}) {
		t.Errorf("a mix of 17 over 7 names versions %v", got)
	}
}

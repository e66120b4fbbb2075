package disruption

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// docTable renders Rules as the table of docs/disruption.md.
func docTable() string {
	var b strings.Builder
	b.WriteString("| field | needs | when | why |\n| --- | --- | --- | --- |\n")
	for _, r := range Rules {
		var needs []string
		for _, f := range r.Remove {
			needs = append(needs, "remove `"+f+"`")
		}
		if r.Drain {
			needs = append(needs, "drain")
		}
		if r.Refuse {
			needs = append(needs, "refused")
		}
		when := "any change"
		switch {
		case r.When == nil:
		case r.Remove != nil && r.Remove[0] == CPUManagerState:
			when = "`cpuManagerPolicy: static` before or after"
		case r.Remove != nil && r.Remove[0] == MemoryManagerState:
			when = "`memoryManagerPolicy: Static` before or after"
		default:
			when = "conditional"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Field, strings.Join(needs, ", "), when, strings.ReplaceAll(r.Why, "|", "\\|"))
	}
	return b.String()
}

// The table of docs/disruption.md is Rules: a rule changed here and not
// there fails.
func TestTheDocsTableIsTheRules(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/disruption.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := docTable(); !strings.Contains(string(doc), want) {
		t.Fatalf("docs/disruption.md does not hold the table of the rules; it should read:\n\n%s", want)
	}
}

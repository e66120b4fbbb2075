package disruption

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// needs says what a rule's change takes besides a restart.
func needs(r Rule) string {
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
	return strings.Join(needs, ", ")
}

// docTable renders Rules as the table of docs/disruption.md.
func docTable() string {
	var b strings.Builder
	b.WriteString("| field | needs | when | why |\n| --- | --- | --- | --- |\n")
	for _, r := range Rules {
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
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Field, needs(r), when, strings.ReplaceAll(r.Why, "|", "\\|"))
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

// readmeTable renders Rules as the README's summary: the fields of each
// need, in the table's order.
func readmeTable() string {
	var order []string
	fields := map[string][]string{}
	for _, r := range Rules {
		n := needs(r)
		if fields[n] == nil {
			order = append(order, n)
		}
		fields[n] = append(fields[n], "`"+r.Field+"`")
	}
	var b strings.Builder
	b.WriteString("| a change of | needs, besides the restart |\n| --- | --- |\n")
	for _, n := range order {
		fmt.Fprintf(&b, "| %s | %s |\n", strings.Join(fields[n], ", "), n)
	}
	return b.String()
}

// The README's summary is Rules too.
func TestTheReadmeSummaryIsTheRules(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := readmeTable(); !strings.Contains(string(readme), want) {
		t.Fatalf("README.md does not hold the summary of the rules; it should read:\n\n%s", want)
	}
}

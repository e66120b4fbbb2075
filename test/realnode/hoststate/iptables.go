package hoststate

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// rules is what iptables-save says of one table: its own chains and its
// rules. Built-in chains and empty tables are left out, since the nftables
// backend keeps a table once anything listed it.
type rules struct {
	Chains []string
	Rules  []string
}

func parseSave(out string) map[string]rules {
	tables := map[string]rules{}
	table := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":") && table != "":
			// ":NAME POLICY [counters]": a user chain has the policy "-".
			if f := strings.Fields(l[1:]); len(f) >= 2 && f[1] == "-" {
				t := tables[table]
				t.Chains = append(t.Chains, f[0])
				tables[table] = t
			}
		case strings.HasPrefix(l, "-A ") && table != "":
			t := tables[table]
			t.Rules = append(t.Rules, l)
			tables[table] = t
		}
	}
	return tables
}

func saveTables(save string) (map[string]rules, bool) {
	out, err := exec.Command(save).Output()
	if err != nil {
		return nil, false
	}
	return parseSave(string(out)), true
}

// iptablesDiff lists the rules and chains present now and not before.
func iptablesDiff(before map[string]rules, now map[string]rules) (added []string) {
	for table, t := range now {
		for _, r := range t.Rules {
			if !slices.Contains(before[table].Rules, r) {
				added = append(added, fmt.Sprintf("%s: %s", table, r))
			}
		}
		for _, c := range t.Chains {
			if !slices.Contains(before[table].Chains, c) {
				added = append(added, fmt.Sprintf("%s: chain %s", table, c))
			}
		}
	}
	slices.Sort(added)
	return added
}

// undoIPTables deletes the rules, then the chains, that were added since
// before, leaving everyone else's alone.
func undoIPTables(save string, before map[string]rules) error {
	now, ok := saveTables(save)
	if !ok {
		return nil
	}
	cmd := strings.TrimSuffix(save, "-save")
	var errs []string
	run := func(args ...string) {
		if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("%s %s: %v: %s", cmd, strings.Join(args, " "), err, out))
		}
	}
	for table, t := range now {
		for _, r := range t.Rules {
			if !slices.Contains(before[table].Rules, r) {
				run(append([]string{"-t", table, "-D"}, splitRule(strings.TrimPrefix(r, "-A "))...)...)
			}
		}
	}
	for table, t := range now {
		for _, c := range t.Chains {
			if !slices.Contains(before[table].Chains, c) {
				run("-t", table, "-F", c)
				run("-t", table, "-X", c)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// splitRule splits a rule as iptables-save prints it into arguments,
// keeping quoted strings (comments) whole.
func splitRule(r string) []string {
	var args []string
	var cur strings.Builder
	quoted := false
	for _, ch := range r {
		switch {
		case ch == '"':
			quoted = !quoted
		case ch == ' ' && !quoted:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(ch)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

package fieldpolicy

import (
	"fmt"
	"slices"
	"strings"
)

// AllowFlag is the flag through which an operator allows refused fields,
// on the reconciler and on each node's agent alike.
const AllowFlag = "allow-kubelet-fields"

// Policy is the default refusal (Refused) less what an operator allows. Its
// zero value refuses every field in Refused.
type Policy struct {
	// Allowed are the paths an operator allows despite Refused, each a path
	// in Refused or beneath one; a path also allows what lies beneath it.
	Allowed []string
}

// ParseAllowed reads the value of AllowFlag: paths separated by commas, in
// one entry or many. A path the policy does not refuse is an error, so that
// a typo is caught when the flag is read rather than leaving the field
// refused in silence.
func ParseAllowed(list []string) (Policy, error) {
	var allowed, unknown []string
	for _, entry := range list {
		for _, p := range strings.Split(entry, ",") {
			p = strings.TrimSpace(p)
			switch {
			case p == "":
			case isKnown(p):
				allowed = append(allowed, p)
			default:
				unknown = append(unknown, p)
			}
		}
	}
	if len(unknown) > 0 {
		return Policy{}, unknownPathsError(unknown)
	}
	slices.Sort(allowed)
	return Policy{Allowed: slices.Compact(allowed)}, nil
}

func isKnown(dotted string) bool {
	return slices.ContainsFunc(knownPaths, func(p path) bool { return p.String() == dotted })
}

func unknownPathsError(unknown []string) error {
	quoted := make([]string, len(unknown))
	for i, u := range unknown {
		quoted[i] = fmt.Sprintf("%q", u)
		if like := knownLike(u); like != "" {
			quoted[i] += fmt.Sprintf(" (did you mean %q?)", like)
		}
	}
	known := make([]string, len(knownPaths))
	for i, p := range knownPaths {
		known[i] = p.String()
	}
	slices.Sort(known)
	return fmt.Errorf("--%s: %s %s the policy refuses (fields are the kubelet's JSON names, case-sensitive); it refuses, and may allow: %s",
		AllowFlag, strings.Join(quoted, ", "), notRefusedFields(len(unknown)), strings.Join(known, ", "))
}

// knownLike is the known path that differs from dotted only in case, or "".
func knownLike(dotted string) string {
	for _, p := range knownPaths {
		if strings.EqualFold(p.String(), dotted) {
			return p.String()
		}
	}
	return ""
}

func notRefusedFields(n int) string {
	if n == 1 {
		return "is not a kubelet field"
	}
	return "are not kubelet fields"
}

// allows says whether the operator allowed p, itself or a path above it.
func (p Policy) allows(field path) bool {
	return slices.ContainsFunc(p.Allowed, func(a string) bool { return field.within(splitPath(a)) })
}

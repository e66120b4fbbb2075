package fieldpolicy

import (
	"flag"
	"fmt"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// ValidatorNoneFlag is the flag through which an operator lets NodeConfigs
// use `validator: none`, on the reconciler and on each node's agent alike:
// a payload nothing judges is one the field policy alone stands between
// and the node.
const ValidatorNoneFlag = "allow-validator-none"

// ErrValidatorNone refuses a version whose NodeConfig asks for no
// validation while the operator has not allowed that.
var ErrValidatorNone = fmt.Errorf("validator: none is refused (nothing would judge the payload before the kubelet reads it); an operator may allow it with --%s", ValidatorNoneFlag)

// Rules are what a version must pass before any node runs it: the field
// policy, and the opt-in for `validator: none`.
type Rules struct {
	Policy
	ValidatorNone bool
}

// Admit says why a version with validator v and payload dropIn may not be
// assigned or activated (nil: it may). The error is *RefusedError or
// ErrValidatorNone.
func (r Rules) Admit(v nodeconfigv1.Validator, dropIn []byte) error {
	if v == nodeconfigv1.Validator_VALIDATOR_NONE && !r.ValidatorNone {
		return ErrValidatorNone
	}
	return r.Check(dropIn)
}

// Register adds AllowFlag and ValidatorNoneFlag to fs; a path AllowFlag
// names that the policy does not refuse fails the flag's parse.
func (r *Rules) Register(fs *flag.FlagSet) {
	fs.Func(AllowFlag, "kubelet fields NodeConfigs may set although the field policy refuses them by default, comma-separated JSON paths (e.g. clusterDNS,authorization.mode); each refused field grants access, code execution or a redirect on the node (README: What a NodeConfig may set)", func(v string) error {
		p, err := ParseAllowed(append(r.Allowed, v))
		if err != nil {
			return err
		}
		r.Policy = p
		return nil
	})
	fs.BoolVar(&r.ValidatorNone, ValidatorNoneFlag, false, "let NodeConfigs use validator: none (their payload then passes only the field policy)")
}

package configcheck

import nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"

// Validators maps a NodeConfig's spec.validator to the validator it names;
// empty means YAML, as the API defaults it. The reconciler and the plugin's
// offline check read the same map, so both judge a name alike.
var Validators = map[string]nodeconfigv1.Validator{
	"":        nodeconfigv1.Validator_VALIDATOR_YAML,
	"yaml":    nodeconfigv1.Validator_VALIDATOR_YAML,
	"json":    nodeconfigv1.Validator_VALIDATOR_JSON,
	"kubelet": nodeconfigv1.Validator_VALIDATOR_KUBELET,
	"none":    nodeconfigv1.Validator_VALIDATOR_NONE,
}

// Package fieldpolicy keeps a NodeConfig from taking over the nodes it
// selects. Whoever may write a NodeConfig, or the ConfigMap it names, writes
// a kubelet drop-in onto every node it selects, and some kubelet fields are
// root on those nodes: they open the kubelet's API to anyone, run pods
// nothing admitted, swap the kubelet's identity or send its traffic
// elsewhere. The policy refuses a drop-in that sets any of them (Refused)
// unless an operator allows that field by name.
//
// The reconciler checks a new version before it assigns it to any node, so a
// refused version touches no node; each node's agent checks it again on the
// node, so a reconciler that was taken over cannot lift the policy. Both
// read the operator's allowances from the same flag (AllowFlag).
//
// Keys are matched the way the kubelet reads a drop-in, which is not the way
// it reads its --config file: the kubelet merges drop-ins as JSON and decodes
// the result with encoding/json, which takes a key that differs from the
// field's name only in case ("ReadOnlyPort", "anonymouſ") for the field.
package fieldpolicy

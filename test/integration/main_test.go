// Package integration tests what ships, one piece at a time, against the
// package's own real API server (test/framework/cluster), where e2e tests
// the services together on rollouts across nodes:
//
//   - the install: deploy/ applied as a cluster runs it (least privilege,
//     the agents' admission policy and priority level, the optional
//     components), the CRD's validation and kubectl explain, buf breaking
//     wired, and the API server dropping Dynamic Kubelet Config's fields;
//   - each service binary alone: health, reflection, SIGTERM, --help and
//     refused insecure flags; checkpointd refusing bad gRPC requests; statusd
//     projecting a node's records onto its Node;
//   - the paths a person follows as documented: 'make run' (test/cmd/localrun)
//     and its Ctrl-C, the commands it prints, the kubectl plugin against it,
//     and the grpcurl walk-through of docs/grpc.md.
//
// A test of several services on a rollout belongs in e2e, one that kills a
// service mid-write in crash, one that needs a real kubelet in realnode. The
// tests run one at a time: the 'make run' ones use its fixed ports.
package integration

import (
	"testing"

	"nodeconfig.io/test/framework/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

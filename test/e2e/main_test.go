// Package e2e turns the NodeConfigStatus field semantics (README, "How it
// works") and the reconciliation rules into tests: all three services run as
// real processes against a real API server, with short soaks and backoffs.
package e2e

import (
	"testing"

	"nodeconfig.io/test/framework/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// Package e2e turns the NodeConfigStatus documentation (seed 001) and the
// reconciliation rules (seed 002) into tests: all three services run as
// real processes against a real API server, with short soaks and backoffs.
package e2e

import (
	"testing"

	"nodeconfig.io/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

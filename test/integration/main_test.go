package integration

import (
	"testing"

	"nodeconfig.io/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

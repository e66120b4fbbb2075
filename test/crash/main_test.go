package crash

import (
	"os"
	"testing"

	"nodeconfig.io/test/framework/powercut"
)

func TestMain(m *testing.M) {
	// The power-cut test starts checkpointd through this binary.
	powercut.MaybeExec()
	os.Exit(m.Run())
}

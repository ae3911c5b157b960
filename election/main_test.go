package election

import (
	"os"
	"testing"

	"github.com/leader-elector/leader-elector/internal/leasetest"
)

// The tests marked t.Parallel wait on client-go's real clock, not on the
// CPU: 8 run at once.
func TestMain(m *testing.M) { os.Exit(leasetest.RunParallel(m, 8)) }

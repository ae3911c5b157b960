package partition

import (
	"os"
	"testing"

	"github.com/leader-elector/leader-elector/internal/leasetest"
)

// The Member's tests run client-go's elector, which renews every retry
// period of real time: they wait rather than compute, so eight run at once.
func TestMain(m *testing.M) { os.Exit(leasetest.RunParallel(m, 8)) }

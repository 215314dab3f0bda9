package lookup_test

import (
	"testing"

	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// shared is the package's control plane, started only by the benchmarks
// that read a live cluster cache.
var shared devtest.Shared

func TestMain(m *testing.M) { shared.Main(m) }

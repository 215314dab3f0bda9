package actions_test

import (
	"testing"

	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// shared is the package's one control plane, started by the first test that
// needs it.
var shared devtest.Shared

func TestMain(m *testing.M) { shared.Main(m) }

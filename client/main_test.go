package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any test leaves a goroutine behind
// (behaviour 10: after Close no goroutine is left).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package pq_test

import (
	"testing"

	"github.com/leasework/leasework/conformance"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs every property of the suite through lib/pq.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Driver: pqdriver.New(), DSN: pgtest.DSN(t)})
}

package pgx_test

import (
	"testing"

	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs every property of the suite through pgx.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t)})
}

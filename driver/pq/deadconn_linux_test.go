package pq_test

import (
	"testing"

	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// The pool's sockets carry the keepalives and user timeout that the package
// documentation promises.
func TestDeadConnSocketOptions(t *testing.T) {
	pgtest.CheckSocketOptions(t, pqdriver.New(), pqdriver.Socket)
}

package pgx_test

import (
	"net"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// The pool's sockets carry the keepalives and user timeout that the package
// documentation promises.
func TestDeadConnSocketOptions(t *testing.T) {
	pgtest.CheckSocketOptions(t, pgxdriver.New(), func(dc any) net.Conn {
		return dc.(*stdlib.Conn).Conn().PgConn().Conn()
	})
}

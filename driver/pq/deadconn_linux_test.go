package pq_test

import (
	"context"
	"testing"
	"time"

	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/pgtest"
)

// The pool's sockets carry the keepalives and user timeout that the package
// documentation promises.
func TestDeadConnSocketOptions(t *testing.T) {
	db := pgtest.Open(t, pqdriver.New())
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got pgtest.SocketOptions
	err = conn.Raw(func(dc any) error {
		got = pgtest.ReadSocketOptions(t, pqdriver.Socket(dc))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := pgtest.SocketOptions{
		KeepAlive: true, KeepAliveIdle: 15 * time.Second, KeepAliveInterval: 5 * time.Second, KeepAliveCount: 3,
		UserTimeout: 30 * time.Second,
	}
	if got != want {
		t.Errorf("socket options %+v, want %+v", got, want)
	}
}

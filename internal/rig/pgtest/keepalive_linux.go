package pgtest

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/netdial"
)

// SocketOptions are the dead-peer settings of a TCP socket.
type SocketOptions struct {
	KeepAlive         bool
	KeepAliveIdle     time.Duration
	KeepAliveInterval time.Duration
	KeepAliveCount    int
	UserTimeout       time.Duration // TCP_USER_TIMEOUT
}

// ReadSocketOptions reads the dead-peer settings of nc, a TCP connection.
func ReadSocketOptions(t testing.TB, nc net.Conn) SocketOptions {
	t.Helper()
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		t.Fatalf("pgtest: the connection is %T, not TCP", nc)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var o SocketOptions
	var errs []error
	err = raw.Control(func(fd uintptr) {
		read := func(level, opt int) int {
			v, err := syscall.GetsockoptInt(int(fd), level, opt)
			if err != nil {
				errs = append(errs, err)
			}
			return v
		}
		o.KeepAlive = read(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) != 0
		o.KeepAliveIdle = time.Duration(read(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)) * time.Second
		o.KeepAliveInterval = time.Duration(read(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL)) * time.Second
		o.KeepAliveCount = read(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
		o.UserTimeout = time.Duration(read(syscall.IPPROTO_TCP, 18 /* TCP_USER_TIMEOUT */)) * time.Millisecond
	})
	if err != nil || len(errs) > 0 {
		t.Fatalf("pgtest: read socket options: %v %v", err, errs)
	}
	return o
}

// CheckSocketOptions checks that a connection of a pool drv opens carries the
// keepalives and user timeout of internal/netdial, which the drivers'
// documentation promises. socket returns the TCP connection under one of
// drv's driver connections, as (*sql.Conn).Raw hands it over.
func CheckSocketOptions(t *testing.T, drv leasework.Driver, socket func(driverConn any) net.Conn) {
	t.Helper()
	db := Open(t, drv)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got SocketOptions
	err = conn.Raw(func(dc any) error {
		got = ReadSocketOptions(t, socket(dc))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := SocketOptions{
		KeepAlive: true, KeepAliveIdle: netdial.KeepAliveIdle, KeepAliveInterval: netdial.KeepAliveInterval,
		KeepAliveCount: netdial.KeepAliveCount, UserTimeout: netdial.UserTimeout,
	}
	if got != want {
		t.Errorf("socket options %+v, want %+v", got, want)
	}
}

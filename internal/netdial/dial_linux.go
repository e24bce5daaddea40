package netdial

import (
	"strings"
	"syscall"
)

// tcpUserTimeout is TCP_USER_TIMEOUT of linux/tcp.h, the same on every
// architecture; package syscall does not define it.
const tcpUserTimeout = 18

// setUserTimeout sets TCP_USER_TIMEOUT on TCP sockets: data left
// unacknowledged for UserTimeout drops the connection.
func setUserTimeout(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(UserTimeout.Milliseconds()))
	}); cerr != nil {
		return cerr
	}
	return err
}

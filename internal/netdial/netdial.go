// Package netdial is the dialer both shipped drivers open connections with:
// TCP keepalives, and on Linux TCP_USER_TIMEOUT, so that a peer that is
// really gone is noticed even on an idle connection.
package netdial

import (
	"net"
	"time"
)

// The socket options of [Dialer], as the drivers' package documentation
// states them.
const (
	KeepAliveIdle     = 15 * time.Second // idle time before the first probe
	KeepAliveInterval = 5 * time.Second  // between probes
	KeepAliveCount    = 3                // unanswered probes that drop the connection
	UserTimeout       = 30 * time.Second // unacknowledged data that drops the connection (Linux only)

	// ConnectTimeout bounds the set-up of a connection (dial, TLS,
	// startup, authentication) when the DSN gives no connect_timeout: a
	// server that accepts connections and then says nothing would
	// otherwise hold the caller, and the connection's pool, forever.
	ConnectTimeout = 30 * time.Second
)

// Dialer returns a dialer with the keepalives and user timeout above.
func Dialer() *net.Dialer {
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: KeepAliveIdle, Interval: KeepAliveInterval, Count: KeepAliveCount,
		},
		Control: setUserTimeout,
	}
}

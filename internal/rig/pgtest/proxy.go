package pgtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasework/leasework/internal/blackhole"
)

// Proxy is a [blackhole.Proxy] to the test server (or another server named
// by a DSN), with that server's DSN pointed at it: [Proxy.Blackhole]
// silences the connections it carries, [Proxy.Refuse] makes the server look
// down.
type Proxy struct {
	*blackhole.Proxy
	dsn string
}

// NewProxy starts a proxy to the test server and closes it at the end of
// the test. Its [Proxy.DSN] is the test server's with the proxy's address.
func NewProxy(t testing.TB) *Proxy {
	t.Helper()
	return NewProxyTo(t, DSN(t))
}

// NewProxyTo starts a proxy to the server of server, a DSN, and closes it
// at the end of the test. Its [Proxy.DSN] is server with the proxy's
// address. The server's address is resolved once: a server restarted on
// the same address is reached again by new connections.
func NewProxyTo(t testing.TB, server string) *Proxy {
	t.Helper()
	network, target, err := address(server)
	if err != nil {
		t.Fatal(err)
	}
	bh, err := blackhole.New(network, target)
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	t.Cleanup(func() { bh.Close() })
	return &Proxy{Proxy: bh, dsn: withAddress(server, bh.Addr())}
}

// address returns the network and address of the server of dsn.
func address(dsn string) (network, target string, err error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", "", fmt.Errorf("pgtest: proxy: parse the server's DSN: %w", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port)), nil
	}
	return "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// Retarget sends the connections the proxy accepts from now on to the
// server of server, a DSN, as a failover's new primary is reached through
// the same address (a virtual IP, a DNS name). Connections open now are
// left as they are.
func (p *Proxy) Retarget(server string) error {
	network, target, err := address(server)
	if err != nil {
		return err
	}
	p.Proxy.Retarget(network, target)
	return nil
}

// withAddress returns dsn, a URL or key=value connection string, with its
// host and port replaced by addr's.
func withAddress(dsn string, addr *net.TCPAddr) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = addr.String()
		return u.String()
	}
	// In a key=value string the last setting of a key wins.
	return fmt.Sprintf("%s host=%s port=%d", dsn, addr.IP, addr.Port)
}

// DSN returns the server's DSN with the proxy's address.
func (p *Proxy) DSN() string { return p.dsn }

package pgtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy forwards TCP connections from 127.0.0.1 to the test server, and can
// make the connections it carries go silent: [Proxy.Blackhole] drops every
// byte they carry, in both directions, and closes neither end, as a failed
// router or a paused virtual machine would.
//
// Through a loopback proxy the kernel still acknowledges every segment, so
// neither TCP keepalives nor TCP_USER_TIMEOUT notice a blackholed
// connection: only bounds kept by the application (deadlines, pings) do.
type Proxy struct {
	ln  net.Listener
	dsn string

	mu       sync.Mutex
	network  string // of the server: "tcp" or "unix"
	target   string
	pipes    map[*pipe]struct{}
	closed   bool
	refusing bool // set by Refuse: new connections are reset at once
	wg       sync.WaitGroup
}

// pipe is one proxied connection.
type pipe struct {
	client, server net.Conn
	silent         atomic.Bool
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, network: network, target: target, pipes: map[*pipe]struct{}{}}
	p.dsn = withAddress(server, ln.Addr().(*net.TCPAddr))
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { p.Close() })
	return p
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
	p.mu.Lock()
	defer p.mu.Unlock()
	p.network, p.target = network, target
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

// DSN returns the test server's DSN with the proxy's address.
func (p *Proxy) DSN() string { return p.dsn }

// Blackhole makes every connection open now stop forwarding, in both
// directions, without closing either end: what either side sends is read
// and dropped, until [Proxy.Close]. Connections opened afterwards forward
// normally. It returns how many connections it silenced.
func (p *Proxy) Blackhole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.pipes {
		if !c.silent.Swap(true) {
			n++
		}
	}
	return n
}

// Refuse makes the server look down, as during a restart: every connection
// open now is closed at both ends, and every connection opened afterwards
// is reset as soon as it is accepted (the client reads a reset, as from a
// port nobody listens on), until [Proxy.Resume]. It returns how many
// connections it closed.
func (p *Proxy) Refuse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	n := 0
	for c := range p.pipes {
		delete(p.pipes, c)
		c.close()
		n++
	}
	return n
}

// Resume ends [Proxy.Refuse]: connections opened from now on are forwarded
// again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
}

// Close stops accepting connections, closes every connection, silent or
// not, and waits for the proxy's goroutines to end. Calling it again does
// nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.pipes {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refusing, network, target := p.refusing, p.network, p.target
		p.mu.Unlock()
		if refusing {
			reset(client)
			continue
		}
		server, err := net.Dial(network, target)
		if err != nil {
			client.Close()
			continue
		}
		c := &pipe{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		if p.refusing { // Refuse came while dialing
			p.mu.Unlock()
			server.Close()
			reset(client)
			continue
		}
		p.pipes[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.forward(c, server, client)
		go p.forward(c, client, server)
	}
}

// forward copies src to dst until either fails. A silent pipe drops what it
// reads, and stays open when an end closes: a dead network tells neither
// end that the other has gone.
func (p *Proxy) forward(c *pipe, dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil && err == nil {
				err = werr
			}
		}
		if err != nil {
			if !c.silent.Load() {
				p.mu.Lock()
				delete(p.pipes, c)
				p.mu.Unlock()
				c.close()
			}
			return
		}
	}
}

// reset closes a client's connection with a reset rather than an orderly
// end, as a port nobody listens on answers.
func reset(client net.Conn) {
	if tc, ok := client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	client.Close()
}

func (c *pipe) close() {
	c.client.Close()
	c.server.Close()
}

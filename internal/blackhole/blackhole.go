// Package blackhole is a TCP proxy on 127.0.0.1 that can make the
// connections it carries go silent, for tests of dead connections: the
// conformance suite's dead-connection properties and the test rigs use it.
// It imports only the standard library.
//
// Through a loopback proxy the kernel still acknowledges every segment, so
// neither TCP keepalives nor TCP_USER_TIMEOUT notice a blackholed
// connection: only bounds kept by the application (deadlines, pings) do.
package blackhole

import (
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards the TCP connections it accepts to a target, and can
// silence them ([Proxy.Blackhole]) or refuse new ones ([Proxy.Refuse]).
type Proxy struct {
	ln net.Listener

	mu       sync.Mutex
	network  string // of the target: "tcp" or "unix"
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

// New starts a proxy on a free port of 127.0.0.1 to target, an address on
// network ("tcp", or "unix" for a socket path). Close it when done.
func New(network, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, network: network, target: target, pipes: map[*pipe]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Retarget sends the connections the proxy accepts from now on to target
// on network, as a failover's new primary is reached through the same
// address (a virtual IP, a DNS name). Connections open now are left as
// they are.
func (p *Proxy) Retarget(network, target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.network, p.target = network, target
}

// Blackhole makes every connection open now stop forwarding, in both
// directions, without closing either end: what either side sends is read
// and dropped, until [Proxy.Close], as a failed router or a paused virtual
// machine would. Connections opened afterwards forward normally. It
// returns how many connections it silenced.
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

// Refuse makes the target look down, as during a restart: every connection
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

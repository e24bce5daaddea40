package conformance

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/blackhole"
)

// This file holds the dead-connection properties' fixtures: the target's
// DSN pointed at another address, a TCP proxy that can blackhole the
// connections it carries, and a server that accepts connections and never
// answers. Standard library only, like the rest of the suite.

// server is the PostgreSQL server a DSN names, and the DSN, to name the
// same database at another address.
type server struct {
	network, address string // what the driver dials: "tcp" host:port, or "unix" <dir>/.s.PGSQL.<port>
	unix             bool   // the DSN names a unix socket directory

	url *url.URL  // the DSN in URL form, or nil
	kv  []setting // the DSN in key=value form, in order
}

// setting is one key=value pair of a DSN.
type setting struct{ key, value string }

// errUnusableDSN marks a DSN the suite cannot point at its proxy: the
// dead-connection properties are skipped then, not failed.
var errUnusableDSN = errors.New("the dead-connection properties need a DSN that names one server by host (a TCP host or a unix socket directory) and port, in URL form (postgres://user@host:5432/db) or key=value form (host=... port=... dbname=...)")

// parseServer finds the server of dsn, a URL (postgres:// or
// postgresql://) or key=value connection string. It fails, wrapping
// errUnusableDSN, for a DSN the suite cannot rewrite: no host (the
// drivers' defaults differ), several hosts, a service file, a host name
// that TLS verifies (sslmode=verify-full), or a string it cannot parse.
// The port is the DSN's, else $PGPORT, else 5432, as every driver takes it.
func parseServer(dsn string) (*server, error) {
	s := &server{}
	var get func(key string) (string, bool)
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		authority, _, _ := strings.Cut(dsn[strings.Index(dsn, "://")+3:], "/")
		authority, _, _ = strings.Cut(authority, "?")
		if i := strings.LastIndex(authority, "@"); i >= 0 {
			authority = authority[i+1:]
		}
		if strings.Contains(authority, ",") {
			return nil, fmt.Errorf("%w: the DSN names several hosts", errUnusableDSN)
		}
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUnusableDSN, err)
		}
		s.url = u
		q := u.Query()
		get = func(key string) (string, bool) {
			// A query parameter overrides the URL's own host and port, as
			// for libpq, pgx and lib/pq.
			if v, ok := q[key]; ok {
				return v[len(v)-1], true
			}
			switch {
			case key == "host" && u.Hostname() != "":
				return u.Hostname(), true
			case key == "port" && u.Port() != "":
				return u.Port(), true
			}
			return "", false
		}
	} else {
		kv, err := parseKeyValue(dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUnusableDSN, err)
		}
		s.kv = kv
		get = func(key string) (string, bool) {
			v, ok := "", false
			for _, kv := range kv { // the last setting of a key wins
				if kv.key == key {
					v, ok = kv.value, true
				}
			}
			return v, ok
		}
	}

	if _, ok := get("service"); ok {
		return nil, fmt.Errorf("%w: the DSN names a service, whose host the suite cannot read", errUnusableDSN)
	}
	host, _ := get("hostaddr") // the address a driver dials when given, as libpq and lib/pq do
	if host == "" {
		host, _ = get("host")
	}
	port, _ := get("port")
	if port == "" {
		port = os.Getenv("PGPORT")
	}
	if port == "" {
		port = "5432"
	}
	switch {
	case host == "":
		return nil, fmt.Errorf("%w: the DSN gives no host, and drivers differ in the one they take then", errUnusableDSN)
	case strings.Contains(host, ",") || strings.Contains(port, ","):
		return nil, fmt.Errorf("%w: the DSN names several hosts", errUnusableDSN)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return nil, fmt.Errorf("%w: port %q", errUnusableDSN, port)
	}
	if strings.HasPrefix(host, "/") {
		s.network, s.address, s.unix = "unix", filepath.Join(host, ".s.PGSQL."+port), true
		return s, nil
	}
	mode, _ := get("sslmode")
	root, _ := get("sslrootcert")
	if mode == "verify-full" || (root == "system" && mode == "") {
		return nil, fmt.Errorf("%w: with sslmode=verify-full the server's certificate is checked against the host name, which the suite replaces with 127.0.0.1", errUnusableDSN)
	}
	s.network, s.address = "tcp", net.JoinHostPort(host, port)
	return s, nil
}

// at returns the server's DSN with addr as its host and port (hostaddr
// dropped) and with the given settings, as "key", "value" pairs, added or
// replaced. A unix socket carries no TLS, so the DSN of one gets
// sslmode=disable: through TCP it is the same connection.
func (s *server) at(addr *net.TCPAddr, settings ...string) string {
	set := map[string]string{"host": addr.IP.String(), "port": strconv.Itoa(addr.Port)}
	if s.unix {
		set["sslmode"] = "disable"
	}
	for i := 0; i+1 < len(settings); i += 2 {
		set[settings[i]] = settings[i+1]
	}
	if s.url != nil {
		u := *s.url
		u.Host = addr.String()
		q := u.Query()
		q.Del("hostaddr")
		q.Del("host")
		q.Del("port")
		for k, v := range set {
			if k != "host" && k != "port" {
				q.Set(k, v)
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	var b strings.Builder
	for _, kv := range s.kv {
		if _, replaced := set[kv.key]; replaced || kv.key == "hostaddr" {
			continue
		}
		writeSetting(&b, kv.key, kv.value)
	}
	for _, k := range []string{"host", "port"} {
		writeSetting(&b, k, set[k])
		delete(set, k)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		writeSetting(&b, k, set[k])
	}
	return b.String()
}

func writeSetting(b *strings.Builder, key, value string) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(key)
	b.WriteString("='")
	for _, r := range value {
		if r == '\'' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('\'')
}

// parseKeyValue parses a key=value connection string as libpq does: pairs
// separated by whitespace, spaces allowed around '=', a value either bare
// or in single quotes, a backslash escaping the next character in both.
func parseKeyValue(dsn string) ([]setting, error) {
	const space = " \t\n\r\v\f"
	var out []setting
	s := strings.TrimLeft(dsn, space)
	for s != "" {
		i := strings.IndexAny(s, "="+space)
		if i <= 0 {
			return nil, fmt.Errorf("key=value connection string: %q has no value", s)
		}
		key := s[:i]
		s = strings.TrimLeft(s[i:], space)
		if !strings.HasPrefix(s, "=") {
			return nil, fmt.Errorf("key=value connection string: no \"=\" after %q", key)
		}
		s = strings.TrimLeft(s[1:], space)
		var value strings.Builder
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		for {
			if s == "" {
				if quoted {
					return nil, errors.New("key=value connection string: unterminated quoted value")
				}
				break
			}
			c := s[0]
			if quoted && c == '\'' {
				s = s[1:]
				break
			}
			if !quoted && strings.IndexByte(space, c) >= 0 {
				break
			}
			if c == '\\' && len(s) > 1 {
				c, s = s[1], s[1:]
			}
			value.WriteByte(c)
			s = s[1:]
		}
		out = append(out, setting{key, value.String()})
		s = strings.TrimLeft(s, space)
	}
	if len(out) == 0 {
		return nil, errors.New("key=value connection string: empty")
	}
	return out, nil
}

// proxy is a blackhole.Proxy to a server, closed when the test ends:
// blackhole drops every byte its connections carry, in both directions,
// and closes neither end, as a failed router or a paused virtual machine
// would.
type proxy struct {
	*blackhole.Proxy
	srv *server
}

// newProxy starts a proxy to srv, closed when the test ends.
func newProxy(t *testing.T, srv *server) *proxy {
	t.Helper()
	bh, err := blackhole.New(srv.network, srv.address)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { bh.Close() })
	return &proxy{Proxy: bh, srv: srv}
}

// dsn is the target's DSN with the proxy's address and settings (see
// server.at).
func (p *proxy) dsn(settings ...string) string { return p.srv.at(p.Addr(), settings...) }

// silentServer accepts TCP connections on 127.0.0.1 and never answers: it
// reads what the client sends and drops it, as an overloaded or stopped
// server process behind a listening socket would.
type silentServer struct {
	ln net.Listener

	mu       sync.Mutex
	accepted []net.Conn
	first    time.Time // of the first accept
	closed   bool
	wg       sync.WaitGroup
}

// newSilentServer starts a silent server, closed when the test ends.
func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("silent server: %v", err)
	}
	s := &silentServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return
			}
			if len(s.accepted) == 0 {
				s.first = time.Now()
			}
			s.accepted = append(s.accepted, c)
			s.wg.Add(1)
			s.mu.Unlock()
			go func() { defer s.wg.Done(); io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *silentServer) addr() *net.TCPAddr { return s.ln.Addr().(*net.TCPAddr) }

// firstAccept returns when the server accepted its first connection, and
// whether it accepted any.
func (s *silentServer) firstAccept() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, !s.first.IsZero()
}

// close closes the listener and every connection, which ends any set-up
// still waiting on them, and waits for the server's goroutines.
func (s *silentServer) close() {
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for _, c := range s.accepted {
		c.Close()
	}
	s.accepted = nil
	s.mu.Unlock()
	s.wg.Wait()
}

package conformance

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// The dead-connection properties find the server of a DSN and point the
// same DSN at their proxy; pgx's and lib/pq's own parsers agree on both.
func TestServerOfDSN(t *testing.T) {
	for _, v := range []string{"PGPORT", "PGHOST", "PGHOSTADDR", "PGSSLMODE"} {
		t.Setenv(v, "") // restored at the end
		os.Unsetenv(v)
	}
	proxy := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40001}
	cases := []struct {
		dsn, network, address string
		hostaddr              bool // pgx ignores hostaddr: checked with lib/pq only
	}{
		{"postgres://u:p@db.example:6543/app?sslmode=require", "tcp", "db.example:6543", false},
		{"postgresql://u@db.example/app?sslmode=disable", "tcp", "db.example:5432", false},
		{"postgres://u@[::1]:5433/app?sslmode=disable", "tcp", "[::1]:5433", false},
		{"postgres://u@/app?host=/var/run/postgresql&port=5433", "unix", "/var/run/postgresql/.s.PGSQL.5433", false},
		{"postgres://u@name/app?hostaddr=10.0.0.7&sslmode=disable", "tcp", "10.0.0.7:5432", true},
		{"host=localhost port=5433 dbname='my db' password='it\\'s' sslmode=disable", "tcp", "localhost:5433", false},
		{"  host = /run/pg  user=x   dbname=y ", "unix", "/run/pg/.s.PGSQL.5432", false},
		{"host=db.example hostaddr=10.0.0.7 user=x sslmode=disable", "tcp", "10.0.0.7:5432", true},
	}
	for _, c := range cases {
		srv, err := parseServer(c.dsn)
		if err != nil {
			t.Errorf("parseServer(%q): %v", c.dsn, err)
			continue
		}
		if srv.network != c.network || srv.address != c.address {
			t.Errorf("parseServer(%q) = %s %s; want %s %s", c.dsn, srv.network, srv.address, c.network, c.address)
		}
		if !c.hostaddr {
			cfg, err := pgconn.ParseConfig(c.dsn)
			if err != nil {
				t.Fatalf("pgx: %q: %v", c.dsn, err)
			}
			want := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
			if strings.HasPrefix(cfg.Host, "/") {
				want = filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
			}
			if want != srv.address {
				t.Errorf("%q: pgx connects to %s, the suite to %s", c.dsn, want, srv.address)
			}
		}

		at := srv.at(proxy, "connect_timeout", "1")
		again, err := parseServer(at)
		if err != nil || again.network != "tcp" || again.address != proxy.String() {
			t.Errorf("the DSN %q at the proxy is %q, whose server is %+v, %v; want tcp %s", c.dsn, at, again, err, proxy)
		}
		for _, key := range []string{"hostaddr", "host=/"} {
			if strings.Contains(at, key) {
				t.Errorf("the DSN %q at the proxy is %q: it keeps %s", c.dsn, at, key)
			}
		}
		cfg, err := pq.NewConfig(at)
		if err != nil {
			t.Errorf("lib/pq: the DSN %q at the proxy, %q: %v", c.dsn, at, err)
			continue
		}
		if cfg.Host != "127.0.0.1" || cfg.Port != 40001 || cfg.Hostaddr != (netip.Addr{}) || cfg.ConnectTimeout.Seconds() != 1 {
			t.Errorf("lib/pq reads the DSN %q at the proxy, %q, as host %q port %d hostaddr %v connect_timeout %v", c.dsn, at, cfg.Host, cfg.Port, cfg.Hostaddr, cfg.ConnectTimeout)
		}
		if srv.unix && cfg.SSLMode != pq.SSLModeDisable {
			t.Errorf("the unix socket's DSN %q at the proxy, %q, has sslmode %q; want disable", c.dsn, at, cfg.SSLMode)
		}
		if strings.Contains(c.dsn, "my db") && (cfg.Database != "my db" || cfg.Password != "it's") {
			t.Errorf("the DSN %q at the proxy, %q, has dbname %q password %q", c.dsn, at, cfg.Database, cfg.Password)
		}
		if pcfg, err := pgconn.ParseConfig(at); err != nil || pcfg.Host != "127.0.0.1" || pcfg.Port != 40001 || pcfg.ConnectTimeout.Seconds() != 1 {
			t.Errorf("pgx reads the DSN %q at the proxy, %q, as %+v, %v", c.dsn, at, pcfg, err)
		}
	}

	t.Setenv("PGPORT", "6000")
	if srv, err := parseServer("host=db.example"); err != nil || srv.address != "db.example:6000" {
		t.Errorf("with PGPORT=6000 and no port: %+v, %v; want db.example:6000", srv, err)
	}

	for _, dsn := range []string{
		"postgres://u@h1:5432,h2:5433/app",
		"host=h1,h2 port=5432",
		"postgres:///app",
		"dbname=app user=x",
		"service=mydb",
		"host=db.example sslmode=verify-full",
		"postgres://u@db.example/app?sslrootcert=system",
		"host='unterminated",
		"postgres://u@%2Ftmp/app", // libpq's, but Go's URL parser (and pgx's) refuses it
		"host",
		"host=db.example port=http",
	} {
		if srv, err := parseServer(dsn); !errors.Is(err, errUnusableDSN) {
			t.Errorf("parseServer(%q) = %+v, %v; want errUnusableDSN", dsn, srv, err)
		}
	}
}

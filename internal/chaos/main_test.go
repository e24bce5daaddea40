//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/pgserver"
)

// server is the soak's own throwaway cluster, which the soak restarts.
var server *pgserver.Server

func TestMain(m *testing.M) {
	if id := os.Getenv(childWorkerEnv); id != "" {
		os.Exit(runWorker(id)) // a worker process of the soak
	}
	os.Exit(run(m))
}

// serverOptions are the settings of the soak's servers. The long run's
// commits wait for its synchronous standby, so that a failover loses no
// acknowledged commit; fsync stays off, as processes die in the soak, never
// the machine.
func serverOptions() pgserver.Options {
	if os.Getenv(soakEnv) == "long" {
		return pgserver.Options{Settings: []string{"synchronous_commit=on"}}
	}
	return pgserver.Options{}
}

func run(m *testing.M) int {
	// Not $LEASEWORK_DSN's server: the soak restarts its server, which
	// would break every other test binary sharing it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := pgserver.StartWith(ctx, serverOptions())
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the soak needs a PostgreSQL server of its own: %v\n", err)
		return 1
	}
	server = srv
	defer srv.Stop()
	return m.Run()
}

//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgserver"
)

// server is the soak's own throwaway cluster, which the soak restarts.
var server *pgserver.Server

func TestMain(m *testing.M) {
	if id := os.Getenv(childWorkerEnv); id != "" {
		os.Exit(runWorker(id)) // a worker process of the soak
	}
	os.Exit(run(m))
}

// serverOptions are the settings of the soak's servers. A transaction
// left idle for 30s is ended, as framework's documentation asks of a
// server with Transactional handlers: a blackholed worker's handler
// transaction, between its completion and COMMIT, would otherwise keep its
// row locked, and its event unclaimable, for good (the soak saw it: a row
// INPROGRESS minutes after its lease ended). The long run's commits wait
// for its synchronous standby, so that a failover loses no acknowledged
// commit; fsync stays off, as processes die in the soak, never the machine.
func serverOptions() pgserver.Options {
	opts := pgserver.Options{Settings: []string{"idle_in_transaction_session_timeout=30s"}}
	if os.Getenv(soakEnv) == "long" {
		opts.Settings = append(opts.Settings, "synchronous_commit=on")
	}
	return opts
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

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

func run(m *testing.M) int {
	// Not $LEASEWORK_DSN's server: the soak restarts its server, which
	// would break every other test binary sharing it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := pgserver.StartWith(ctx, pgserver.Options{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the soak needs a PostgreSQL server of its own: %v\n", err)
		return 1
	}
	server = srv
	defer srv.Stop()
	return m.Run()
}

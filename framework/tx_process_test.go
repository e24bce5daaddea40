package framework_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgserver"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// txChild is the worker process of the exactly-once test: a Transactional
// handler writes its event's effect, says so, and waits for a line on
// stdin before it returns (and its transaction completes and commits). It
// is killed, or stopped and resumed, before that; resumed, it waits until
// both its completions are rejected, stops, and prints its counters. Its
// lease is long and its renewals rare, so that only the fixtures expire
// its claims and the resumed handlers' completions are what find them
// taken.
func txChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		return 1
	}
	drv := pgtest.Drivers[0].New()
	db, err := drv.Open(os.Getenv(pgserver.EnvDSN))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	schema := os.Getenv(childSchemaEnv)
	w, err := framework.New(db, drv, framework.Config{
		Schema: schema, Retention: -1, Concurrency: 2, PollInterval: 20 * time.Millisecond,
		Lease: time.Minute, RenewEvery: 20 * time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return fail(err)
	}
	var out sync.Mutex
	resume := make(chan struct{})
	table := ident(schema) + ".effects"
	err = w.Register("tx", framework.Transactional(func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		if err := insertEffect(ctx, tx, table, c); err != nil {
			return err
		}
		out.Lock()
		fmt.Printf("claimed %s %d %d\n", c.EventID, c.ID, c.Generation)
		out.Unlock()
		<-resume
		return nil
	}), framework.RetryPolicy{})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(err)
	}
	close(resume)
	deadline := time.Now().Add(waitTimeout)
	for w.Counters().StaleRejections < 2 {
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("both completions not rejected within %v: %+v", waitTimeout, w.Counters()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return fail(err)
	}
	b, err := json.Marshal(w.Counters())
	if err != nil {
		return fail(err)
	}
	out.Lock()
	defer out.Unlock()
	fmt.Printf("result %s\n", b)
	return 0
}

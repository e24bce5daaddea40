package leaseworktest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/leaseworktest"
)

// exampleTB stands in for the *testing.T of a test, which an example does
// not have: a failure panics.
type exampleTB struct{ testing.TB }

func (exampleTB) Helper()                           {}
func (exampleTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// exampleStore returns a migrated store in a schema of its own on the
// server named by $LEASEWORK_DSN, and a function that drops the schema.
func exampleStore(ctx context.Context) (*lease.Store, func()) {
	drv := pgx.New()
	db, err := drv.Open(os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := lease.New(db, drv, lease.Options{Schema: fmt.Sprintf("example_%d", time.Now().UnixNano())})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return store, func() {
		store.DropSchema(ctx)
		db.Close()
	}
}

// A handler that resumes from the progress an earlier attempt recorded,
// run on a second attempt without a worker.
func ExampleWork() {
	var t testing.TB = exampleTB{} // a test's *testing.T
	ctx := context.Background()

	// The handler under test exports three pages, recording each one done.
	export := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		page := 0
		if c.Progress != nil {
			page, _ = strconv.Atoi(string(c.Progress))
		}
		for page < 3 {
			page++
			if err := framework.RecordProgress(ctx, []byte(strconv.Itoa(page))); err != nil {
				return err
			}
		}
		return nil
	})

	res, err := leaseworktest.Work(t, ctx, export, leasework.Claim{Kind: "export", Attempt: 2, Progress: []byte("1")})
	fmt.Println("error:", err)
	fmt.Printf("attempt %d of %d, generation %d, queue %s\n",
		res.Claim.Attempt, res.Claim.MaxAttempts, res.Claim.Generation, res.Claim.Queue)
	fmt.Printf("progress recorded: %q\n", res.Progress)
	// Output:
	// error: <nil>
	// attempt 2 of 25, generation 2, queue default
	// progress recorded: ["2" "3"]
}

type Email struct {
	To string `json:"to"`
}

var SendEmail = lease.Kind[Email]{Name: "email.send", Queue: "mail", MaxAttempts: 5}

// A typed handler, given its arguments as a worker would after
// framework.HandleKind: encoded with the kind's codec and decoded again.
func ExampleWorkKind() {
	var t testing.TB = exampleTB{} // a test's *testing.T
	ctx := context.Background()

	send := func(ctx context.Context, c *leasework.Claim, m Email) error {
		if m.To == "" {
			return leasework.Permanent(errors.New("no recipient"))
		}
		return nil
	}

	res, err := leaseworktest.WorkKind(t, ctx, SendEmail, send, Email{To: "ada@example.com"}, leasework.Claim{})
	fmt.Printf("payload %s in queue %s: %v\n", res.Claim.Payload, res.Claim.Queue, err)

	_, err = leaseworktest.WorkKind(t, ctx, SendEmail, send, Email{}, leasework.Claim{Attempt: 5})
	fmt.Println("no recipient, permanent:", leasework.IsPermanent(err))
	// Output:
	// payload {"to":"ada@example.com"} in queue mail: <nil>
	// no recipient, permanent: true
}

// The application code under test enqueues in the caller's transaction;
// the test asserts what it enqueued before anything is committed.
func ExampleRequireEnqueuedTx() {
	var t testing.TB = exampleTB{} // a test's *testing.T
	ctx := context.Background()
	store, drop := exampleStore(ctx)
	defer drop()

	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()

	// The code under test: a sign-up writes its user and enqueues two
	// e-mails in one transaction.
	if _, err := SendEmail.Enqueue(ctx, store, tx, Email{To: "ada@example.com"}, Email{To: "admin@example.com"}); err != nil {
		log.Fatal(err)
	}

	rows := leaseworktest.RequireEnqueuedKindTx(t, ctx, store.WrapTx(tx), store, SendEmail,
		&leaseworktest.EnqueuedOptions{Queue: "mail", Priority: new(0), Count: 2})
	for _, r := range rows {
		fmt.Println(r.Kind, r.Status, r.MaxAttempts, r.Args.To)
	}
	// Uncommitted, the events are not in the table for anyone else.
	leaseworktest.RequireNotEnqueued(t, ctx, store, SendEmail.Name, nil)
	// Output:
	// email.send READY 5 ada@example.com
	// email.send READY 5 admin@example.com
}

// The body of a framework.Transactional handler, run in the test's
// transaction: its writes are there to assert on, then rolled back.
func ExampleWorkTx() {
	var t testing.TB = exampleTB{} // a test's *testing.T
	ctx := context.Background()
	store, drop := exampleStore(ctx)
	defer drop()

	// The handler under test: an order placed sends its confirmation, and
	// completes its claim in the same transaction.
	placed := func(ctx context.Context, tx *sql.Tx, c *leasework.Claim) error {
		if _, err := SendEmail.Enqueue(ctx, store, tx, Email{To: c.Key}); err != nil {
			return err
		}
		return framework.CompleteInTx(ctx, tx)
	}

	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	res, err := leaseworktest.WorkTx(t, ctx, tx, placed, leasework.Claim{Kind: "order.placed", Key: "ada@example.com"})
	fmt.Println("error:", err, "completed in tx:", res.CompletedInTx)
	rows := leaseworktest.RequireEnqueuedKindTx(t, ctx, store.WrapTx(tx), store, SendEmail, &leaseworktest.EnqueuedOptions{Count: 1})
	fmt.Println("confirmation to", rows[0].Args.To)
	// Output:
	// error: <nil> completed in tx: true
	// confirmation to ada@example.com
}

// A claim whose worker died: the lease expires at once instead of after
// its length, another claim takes the event, and the first owner is
// fenced off.
func ExampleExpireLease() {
	var t testing.TB = exampleTB{} // a test's *testing.T
	ctx := context.Background()
	store, drop := exampleStore(ctx)
	defer drop()

	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := SendEmail.Enqueue(ctx, store, tx, Email{To: "ada@example.com"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	req := lease.ClaimRequest{Queue: "mail", Kinds: []string{SendEmail.Name}, Limit: 1, Lease: time.Hour}
	first, err := store.Claim(ctx, req)
	if err != nil {
		log.Fatal(err)
	}

	leaseworktest.ExpireLease(t, ctx, store, first[0].ID)

	second, err := store.Claim(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed again, generation", second[0].Generation, "reclaimed:", second[0].Reclaimed)
	_, err = store.Write(ctx, lease.Complete(first[0].Ref()))
	fmt.Println("stale owner fenced off:", errors.Is(err, leasework.ErrLeaseLost))
	// Output:
	// claimed again, generation 2 reclaimed: true
	// stale owner fenced off: true
}

// A handler made of steps, run twice as a worker runs two attempts of one
// event: the steps the first call recorded, passed in the second call's
// Claim.Steps, are answered from the record instead of running again.
func ExampleWork_steps() {
	var t testing.TB = exampleTB{} // a test's *testing.T
	ctx := context.Background()

	// The handler under test charges, then ships; the carrier is down on
	// the first attempt.
	fulfil := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		charge, err := framework.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			fmt.Printf("attempt %d: charge\n", c.Attempt)
			return "ch_1", nil
		})
		if err != nil {
			return err
		}
		tracking, err := framework.Step(ctx, "ship", func(ctx context.Context) (string, error) {
			fmt.Printf("attempt %d: ship, paid by %s\n", c.Attempt, charge)
			if c.Attempt == 1 {
				return "", errors.New("carrier unavailable")
			}
			return "track-9", nil
		})
		if err != nil {
			return err
		}
		return framework.RecordOutput(ctx, []byte(tracking))
	})

	first, err := leaseworktest.Work(t, ctx, fulfil, leasework.Claim{Kind: "order.fulfil"})
	fmt.Printf("attempt 1: %v; recorded %s\n", err, first.Steps)
	second, err := leaseworktest.Work(t, ctx, fulfil, leasework.Claim{
		Kind: "order.fulfil", EventID: first.Claim.EventID, Attempt: 2, Steps: first.Steps,
	})
	fmt.Printf("attempt 2: %v; recorded %s; output %s\n", err, second.Steps, second.Output)
	// Output:
	// attempt 1: charge
	// attempt 1: ship, paid by ch_1
	// attempt 1: carrier unavailable; recorded map[charge:"ch_1"]
	// attempt 2: ship, paid by ch_1
	// attempt 2: <nil>; recorded map[ship:"track-9"]; output track-9
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/leasework/leasework"
	lwpgx "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// exampleStore opens the database named by $LEASEWORK_DSN (the tests'
// server) and returns a migrated store in a schema of its own, and a func
// that drops the schema and closes the pool: the steps Example shows.
func exampleStore(ctx context.Context) (*lease.Store, func()) {
	drv := lwpgx.New()
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

// exampleEnqueue enqueues events in a transaction of their own and
// commits it: the outbox step Example shows, without a business write.
func exampleEnqueue(ctx context.Context, store *lease.Store, events ...lease.Event) {
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Enqueue(ctx, tx, events...); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// A transactional outbox: the event commits with the business write, a
// worker claims it, and a stale owner's late completion is rejected.
func Example() {
	ctx := context.Background()
	drv := lwpgx.New()
	db, err := drv.Open(os.Getenv("LEASEWORK_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	schema := fmt.Sprintf("example_%d", time.Now().UnixNano()) // a schema of its own
	store, err := lease.New(db, drv, lease.Options{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	defer store.DropSchema(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	// ... the business write goes in tx too ...
	if _, err := store.Enqueue(ctx, tx, lease.Event{EventID: "order-42-placed", Kind: "order.placed"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	first, err := store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", first[0].EventID, "generation", first[0].Generation)

	// The first worker stalls past its lease (a fixture stands in for the
	// wait), and another worker claims the row again.
	if err := leasetest.ExpireLease(ctx, store, first[0].ID); err != nil {
		log.Fatal(err)
	}
	second, err := store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reclaimed", second[0].EventID, "generation", second[0].Generation)

	_, err = store.Write(ctx, lease.Complete(first[0].Ref()))
	fmt.Println("stale completion lost its lease:", errors.Is(err, leasework.ErrLeaseLost))
	_, err = store.Write(ctx, lease.Complete(second[0].Ref()))
	fmt.Println("current completion:", err)
	// Output:
	// claimed order-42-placed generation 1
	// reclaimed order-42-placed generation 2
	// stale completion lost its lease: true
	// current completion: <nil>
}

// Order per key: the events of one key are claimed one at a time, in enqueue
// order; a FAILED event holds its key until an operator requeues or discards
// it.
func Example_orderPerKey() {
	ctx := context.Background()
	store, done := exampleStore(ctx) // as in Example
	defer done()
	db := store.DB()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := store.Enqueue(ctx, tx,
		lease.Event{EventID: "order-42-placed", Kind: "order", Key: "order-42"},
		lease.Event{EventID: "order-42-paid", Kind: "order", Key: "order-42"},
		lease.Event{EventID: "order-42-shipped", Kind: "order", Key: "order-42"}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	claim := func() []string {
		cs, err := store.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: 30 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.EventID)
			if c.EventID == "order-42-paid" {
				_, err = store.Write(ctx, lease.Fail(c.Ref(), "card declined"))
			} else {
				_, err = store.Write(ctx, lease.Complete(c.Ref()))
			}
			if err != nil {
				log.Fatal(err)
			}
		}
		return ids
	}
	fmt.Println("claimed", claim())
	fmt.Println("claimed", claim())
	fmt.Println("claimed", claim())

	held, err := store.HeldKeys(ctx, lease.HeldKeysRequest{})
	if err != nil {
		log.Fatal(err)
	}
	h := held[0]
	fmt.Printf("key %s held by %s (%s), %d waiting\n", h.Key, h.EventID, h.LastError, h.Waiting)
	if _, err := store.Discard(ctx, leasework.Ref{ID: h.HeadID, Generation: h.Generation}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after discard, claimed", claim())
	// Output:
	// claimed [order-42-placed]
	// claimed [order-42-paid]
	// claimed []
	// key order-42 held by order-42-paid (card declined), 1 waiting
	// after discard, claimed [order-42-shipped]
}

// Queues and priorities: a claim reads one queue, priority 0 first; a
// paused queue gives nothing until it is resumed.
func Example_queues() {
	ctx := context.Background()
	store, done := exampleStore(ctx) // as in Example
	defer done()
	exampleEnqueue(ctx, store,
		lease.Event{EventID: "report-1", Kind: "report", Queue: "bulk"},
		lease.Event{EventID: "newsletter", Kind: "email", Queue: "mail", Priority: 5},
		lease.Event{EventID: "password-reset", Kind: "email", Queue: "mail"}, // priority 0: first
	)

	claimOne := func(queue string) string {
		claims, err := store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: 30 * time.Second, Queue: queue})
		if err != nil {
			log.Fatal(err)
		}
		if len(claims) == 0 {
			return "nothing"
		}
		return claims[0].EventID
	}
	fmt.Println("mail:", claimOne("mail"))
	fmt.Println("mail:", claimOne("mail"))

	if _, err := store.PauseQueue(ctx, "bulk"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("bulk, paused:", claimOne("bulk"))
	if _, err := store.ResumeQueue(ctx, "bulk"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("bulk, resumed:", claimOne("bulk"))
	// Output:
	// mail: password-reset
	// mail: newsletter
	// bulk, paused: nothing
	// bulk, resumed: report-1
}

// Cancelling an event while a worker runs it: the owner's late completion
// is rejected as cancelled.
func ExampleStore_Cancel() {
	ctx := context.Background()
	store, done := exampleStore(ctx) // as in Example
	defer done()
	exampleEnqueue(ctx, store, lease.Event{EventID: "order-7-ship", Kind: "ship"})
	claims, err := store.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	if _, err := store.Cancel(ctx, claims[0].ID, "order withdrawn"); err != nil {
		log.Fatal(err)
	}
	_, err = store.Write(ctx, lease.Complete(claims[0].Ref()))
	fmt.Println("late completion cancelled:", errors.Is(err, leasework.ErrCancelled), "lease lost:", errors.Is(err, leasework.ErrLeaseLost))
	row, err := store.Get(ctx, claims[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(row.Status, row.LastError)
	// Output:
	// late completion cancelled: true lease lost: true
	// DISCARDED cancelled: order withdrawn
}

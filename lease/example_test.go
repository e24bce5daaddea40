package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/lease"
	"github.com/leasework/leasework/lease/leasetest"
)

// A transactional outbox: the event commits with the business write, a
// worker claims it, and a stale owner's late completion is rejected.
func Example() {
	ctx := context.Background()
	drv := pgx.New()
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

	err = store.Complete(ctx, first[0].Ref())
	fmt.Println("stale completion lost its lease:", errors.Is(err, leasework.ErrLeaseLost))
	fmt.Println("current completion:", store.Complete(ctx, second[0].Ref()))
	// Output:
	// claimed order-42-placed generation 1
	// reclaimed order-42-placed generation 2
	// stale completion lost its lease: true
	// current completion: <nil>
}

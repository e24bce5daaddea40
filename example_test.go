package leasework_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasework/leasework"
)

func ExamplePermanent() {
	err := leasework.Permanent(errors.New("payload is not valid JSON"))
	fmt.Println(leasework.IsPermanent(err))
	fmt.Println(leasework.IsPermanent(fmt.Errorf("publish: %w", err)))
	fmt.Println(leasework.IsPermanent(errors.New("broker unavailable")))
	fmt.Println(leasework.Permanent(nil) == nil)
	// Output:
	// true
	// true
	// false
	// true
}

func ExampleHandlerFunc() {
	var h leasework.Handler = leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
		fmt.Printf("event %s generation %d: %s\n", c.EventID, c.Generation, c.Payload)
		return nil
	})
	c := &leasework.Claim{ID: 1, EventID: "event-001", Generation: 2, Payload: []byte("hello")}
	if err := h.Handle(context.Background(), c); err != nil {
		fmt.Println(err)
	}
	fmt.Println(c.Ref())
	// Output:
	// event event-001 generation 2: hello
	// {1 2}
}

func ExampleErrLeaseLost() {
	// What an outcome write returns when a newer claim replaced this one.
	err := fmt.Errorf("lease: complete row 7 generation 1: %w", leasework.ErrLeaseLost)
	if errors.Is(err, leasework.ErrLeaseLost) {
		fmt.Println("stale owner: do not retry the write")
	}
	// Output: stale owner: do not retry the write
}

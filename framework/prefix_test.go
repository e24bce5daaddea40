package framework_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// An error wrapping another of its own package names the package once:
// "framework: Register "k": RetryPolicy.Multiplier is 0.5; …", not
// "framework: Register "k": framework: RetryPolicy.Multiplier …".
func TestErrorsNameTheirPackageOnce(t *testing.T) {
	drv := pgtest.Drivers[0].New()
	db := pgtest.Open(t, drv)
	w, err := framework.New(db, drv, framework.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ok := leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil })
	_, badConfig := framework.New(db, drv, framework.Config{Concurrency: -1})
	_, badSchema := framework.New(db, drv, framework.Config{Schema: "Bad"})
	cases := []struct {
		name     string
		err      error
		contains string
		is       error
	}{
		{"Register with a bad policy", w.Register("k", ok, framework.RetryPolicy{Multiplier: 0.5}),
			`framework: Register "k": RetryPolicy.Multiplier is 0.5`, nil},
		{"Register with a bad kind", w.Register("", ok, framework.RetryPolicy{}), `framework: Register "": lease: kind is empty`, nil},
		{"New with a bad config", badConfig, "framework: Config.Concurrency is -1", nil},
		{"New with a bad schema", badSchema, `framework: lease: Options.Schema "Bad"`, nil},
		{"a Transactional handler outside a worker",
			framework.Transactional(func(context.Context, *sql.Tx, *leasework.Claim) error { return nil }).
				Handle(context.Background(), &leasework.Claim{}),
			"framework: Transactional handler: context carries no claim", framework.ErrNoClaim},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil {
				t.Fatal("no error")
			}
			msg := c.err.Error()
			if !strings.HasPrefix(msg, c.contains) {
				t.Errorf("error %q; want it to start with %q", msg, c.contains)
			}
			for _, prefix := range []string{"framework: ", "lease: "} {
				if n := strings.Count(msg, prefix); n > 1 {
					t.Errorf("error %q says %q %d times; want once", msg, prefix, n)
				}
			}
			if c.is != nil && !errors.Is(c.err, c.is) {
				t.Errorf("error %q does not match %v", msg, c.is)
			}
		})
	}
}

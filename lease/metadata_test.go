package lease_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Metadata given at enqueue reaches every claim of the event and its row,
// through both insert paths (plain and skipping duplicates) and every
// enqueue path (the INSERT, COPY); an event without any has nil.
func TestMetadataTravelsFromEnqueueToClaim(t *testing.T) {
	pgtest.EachEnqueuePath(t, func(t *testing.T, p pgtest.EnqueuePath) {
		s := pgtest.Store(t, p.NewDriver(), p.Options(lease.Options{}))
		ctx := context.Background()
		meta := map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tenant":      `a "quoted" tenant, ünïcode, <tags>`,
			"empty":       "",
		}
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", EventID: "with", Metadata: meta},
			lease.Event{Kind: "k", EventID: "without"},
			lease.Event{Kind: "k", EventID: "empty map", Metadata: map[string]string{}},
		)
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true},
			lease.Event{Kind: "k", EventID: "skipping", Metadata: map[string]string{"a": "1"}},
			lease.Event{Kind: "k", EventID: "with", Metadata: map[string]string{"ignored": "duplicate"}},
		); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]string{"with": meta, "without": nil, "empty map": nil, "skipping": {"a": "1"}}
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != len(want) {
			t.Fatalf("claimed %d events; want %d", len(claims), len(want))
		}
		for _, c := range claims {
			if !maps.Equal(c.Metadata, want[c.EventID]) || (c.Metadata == nil) != (want[c.EventID] == nil) {
				t.Errorf("claim of %q has metadata %q; want %q", c.EventID, c.Metadata, want[c.EventID])
			}
			r, err := s.Get(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(r.Metadata, want[c.EventID]) {
				t.Errorf("row of %q has metadata %q; want %q", c.EventID, r.Metadata, want[c.EventID])
			}
		}
		// A reclaim carries it too.
		if _, err := s.DB().ExecContext(ctx, "UPDATE "+s.QualifiedTable()+" SET lease_until = now() - interval '1 second'"); err != nil {
			t.Fatal(err)
		}
		again, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range again {
			if !c.Reclaimed || !maps.Equal(c.Metadata, want[c.EventID]) {
				t.Errorf("reclaim of %q: reclaimed %v, metadata %q; want %q", c.EventID, c.Reclaimed, c.Metadata, want[c.EventID])
			}
		}
	})
}

// Metadata the database could not store, or that is too large, is refused
// before anything is sent, naming the field.
func TestMetadataIsChecked(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	for _, c := range []struct {
		meta map[string]string
		want string
	}{
		{map[string]string{"": "v"}, "Metadata has an empty key"},
		{map[string]string{"k\x00": "v"}, `Metadata key "k\x00" contains a NUL byte`},
		{map[string]string{"k": "v\x00"}, `Metadata["k"] "v\x00" contains a NUL byte`},
		{map[string]string{"k": "\xff"}, `Metadata["k"] "\xff" is not valid UTF-8`},
		{map[string]string{"a": strings.Repeat("x", lease.MaxMetadataBytes/2), "b": strings.Repeat("x", lease.MaxMetadataBytes/2)}, "at most 16384 are allowed"},
	} {
		tx, err := s.DB().Begin()
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Enqueue(context.Background(), tx, lease.Event{Kind: "k", Metadata: c.meta})
		tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("enqueue with metadata %q: %v; want an error saying %q", c.meta, err, c.want)
		}
	}
}

// The table refuses metadata a claim could not read, written by a producer's
// own SQL: a claim would have to settle such a row FAILED. An array value,
// empty or not, is refused too (migration 7's check, in lax mode, unwrapped
// arrays and admitted {"tenant": ["acme"]} and {"a": []}).
func TestMetadataColumnRefusesWhatAClaimCannotRead(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	for _, bad := range []string{`[1, 2]`, `"text"`, `{"n": 1}`, `{"a": "x", "b": null}`, `{"o": {"k": "v"}}`,
		`{"tenant": ["acme"]}`, `{"a": []}`, `{"a": "x", "b": [[]]}`, `{"a": [{"k": "v"}]}`, `{"a": {}}`, `[]`, `[{"a": "x"}]`, `null`} {
		_, err := s.DB().ExecContext(context.Background(),
			"INSERT INTO "+s.QualifiedTable()+" (event_id, kind, metadata) VALUES ($1, 'k', $2::jsonb)", "bad "+bad, bad)
		if got := s.Driver().SQLState(err); got != "23514" {
			t.Errorf("insert of metadata %s: %v (SQLSTATE %q); want check_violation, 23514", bad, err, got)
		}
	}
	for i, good := range []string{`{"a": "x"}`, `{}`, `{"a": "", "b": "[1]"}`} {
		if _, err := s.DB().ExecContext(context.Background(),
			"INSERT INTO "+s.QualifiedTable()+` (event_id, kind, metadata) VALUES ($1, 'k', $2::jsonb)`, fmt.Sprint("good ", i), good); err != nil {
			t.Errorf("insert of metadata %s, an object of strings: %v", good, err)
		}
	}
}

// The table refuses a due time a claim could not read: PostgreSQL's
// infinite timestamps have no time.Time (and -infinity would be due at
// once).
func TestDueTimeColumnRefusesInfinity(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	for _, bad := range []string{"-infinity", "infinity"} {
		_, err := s.DB().ExecContext(context.Background(),
			"INSERT INTO "+s.QualifiedTable()+" (event_id, kind, next_attempt_at) VALUES ($1, 'k', $2::timestamptz)", "bad "+bad, bad)
		if got := s.Driver().SQLState(err); got != "23514" {
			t.Errorf("insert of next_attempt_at %s: %v (SQLSTATE %q); want check_violation, 23514", bad, err, got)
		}
	}
}

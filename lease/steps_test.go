package lease_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// reclaim expires the lease of row id and claims it again: the next
// attempt, at a higher generation.
func reclaim(t *testing.T, s *lease.Store, id int64) leasework.Claim {
	t.Helper()
	ctx := context.Background()
	if err := leasetest.ExpireLease(ctx, s, id); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
	if err != nil || len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("claim after expiry = %+v, %v; want row %d again", cs, err, id)
	}
	return cs[0]
}

// A step recorded by one attempt is handed to the next claim of the row,
// whether that claim takes back an expired lease or a retry; the row keeps
// the generation that recorded each step. A step recorded again replaces
// its result; a row with none hands none.
func TestStepsAreHandedToTheNextAttempts(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		c := claimByEvent(t, s, "a", "plain")
		a := c["a"]
		for _, w := range []lease.Write{
			lease.Step(a, "reserve", []byte(`{"sku":"x"}`)),
			lease.Step(a, "charge", []byte("first")),
			lease.Step(a, "charge", []byte("second\x00binary")),
			lease.Output(a, []byte("out")),
		} {
			if r, err := s.Write(ctx, w); err != nil || r.Verdict != lease.VerdictAccepted {
				t.Fatalf("%s %q: %+v, %v; want accepted", w.Op(), w.StepName(), r, err)
			}
		}
		next := reclaim(t, s, a.ID)
		want := map[string][]byte{"reserve": []byte(`{"sku":"x"}`), "charge": []byte("second\x00binary")}
		if len(next.Steps) != len(want) {
			t.Fatalf("next claim's steps %q; want %q", next.Steps, want)
		}
		for name, v := range want {
			if !bytes.Equal(next.Steps[name], v) {
				t.Errorf("next claim's step %q = %q; want %q", name, next.Steps[name], v)
			}
		}
		row := getRow(t, s, a.ID)
		if len(row.Steps) != 2 || !bytes.Equal(row.Output, []byte("out")) {
			t.Fatalf("row's steps %+v, output %q; want 2 steps and the output", row.Steps, row.Output)
		}
		for _, st := range row.Steps {
			if st.Generation != a.Generation || st.At.IsZero() || !bytes.Equal(st.Value, want[st.Name]) {
				t.Errorf("row's step %+v; want recorded by generation %d with %q", st, a.Generation, want[st.Name])
			}
		}
		// Through a retry too, and the new attempt adds its own.
		if _, err := s.Write(ctx, lease.Step(next.Ref(), "ship", []byte("s"))); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(ctx, lease.Retry(next.Ref(), 0, "boom")); err != nil {
			t.Fatal(err)
		}
		cs, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil || len(cs) != 1 || len(cs[0].Steps) != 3 || string(cs[0].Steps["ship"]) != "s" {
			t.Fatalf("claim after the retry = %+v, %v; want row %d with three steps", cs, err, a.ID)
		}
		if plain := reclaim(t, s, c["plain"].ID); plain.Steps != nil {
			t.Errorf("a row without steps hands %q; want nil", plain.Steps)
		}
	})
}

// A stale owner's step and output are rejected like any stale write, and
// the attempt that replaced it never reads them; the list of rows leaves
// steps and output out.
func TestStaleStepIsRejectedAndNeverRead(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		old := claimByEvent(t, s, "a")["a"]
		if _, err := s.Write(ctx, lease.Step(old, "kept", []byte("g1"))); err != nil {
			t.Fatal(err)
		}
		next := reclaim(t, s, old.ID)
		for _, w := range []lease.Write{lease.Step(old, "late", []byte("stale")), lease.Step(old, "kept", []byte("stale")), lease.Output(old, []byte("stale"))} {
			r, err := s.Write(ctx, w)
			if !errors.Is(err, leasework.ErrLeaseLost) || r.Verdict != lease.VerdictLost {
				t.Errorf("stale %s %q: %+v, %v; want lost", w.Op(), w.StepName(), r, err)
			}
		}
		row := getRow(t, s, old.ID)
		if len(row.Steps) != 1 || row.Steps[0].Name != "kept" || string(row.Steps[0].Value) != "g1" || row.Output != nil {
			t.Fatalf("row after the stale writes: steps %+v, output %q; want only the first attempt's step", row.Steps, row.Output)
		}
		if err := leasetest.ExpireLease(ctx, s, next.ID); err != nil {
			t.Fatal(err)
		}
		third := reclaim(t, s, old.ID)
		if len(third.Steps) != 1 || string(third.Steps["kept"]) != "g1" {
			t.Errorf("third claim's steps %q; want only kept=g1", third.Steps)
		}
		rows, err := s.List(ctx, lease.ListRequest{})
		if err != nil || len(rows) != 1 || rows[0].Steps != nil || rows[0].Output != nil {
			t.Errorf("List = %+v, %v; want the row without steps or output", rows, err)
		}
	})
}

// A step recorded in the caller's transaction commits with its business
// writes or not at all: rolled back, neither is there; committed, both
// are; by a stale owner, it is rejected and the transaction rolled back.
func TestStepInTransactionCommitsWithItsEffects(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		ref := claimByEvent(t, s, "a")["a"]
		effects := pgtest.SchemaName()
		if _, err := s.DB().ExecContext(ctx, `CREATE TABLE `+effects+` (step text)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DB().Exec(`DROP TABLE ` + effects) })
		inTx := func(name string, ref leasework.Ref, commit bool) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` VALUES ($1)`, name); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteTx(ctx, tx, lease.Step(ref, name, []byte(name))); err != nil {
				return err
			}
			if commit {
				return tx.Commit()
			}
			return nil
		}
		if err := inTx("rolled", ref, false); err != nil {
			t.Fatal(err)
		}
		if err := inTx("committed", ref, true); err != nil {
			t.Fatal(err)
		}
		newer, err := leasetest.NewerGeneration(ctx, s, ref.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := inTx("stale", ref, true); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Errorf("a stale owner's step in its transaction: %v; want ErrLeaseLost", err)
		}
		var got []string
		rows, err := s.DB().QueryContext(ctx, `SELECT step FROM `+effects+` ORDER BY step`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var st string
			rows.Scan(&st)
			got = append(got, st)
		}
		rows.Close()
		if strings.Join(got, ",") != "committed" {
			t.Errorf("effects committed: %q; want only the committed step's", got)
		}
		row := getRow(t, s, ref.ID)
		if len(row.Steps) != 1 || row.Steps[0].Name != "committed" || row.Steps[0].Generation != ref.Generation {
			t.Errorf("row's steps %+v; want the committed one alone, of generation %d (now %d)", row.Steps, ref.Generation, newer.Generation)
		}
	})
}

// A step's name is checked before anything is sent: empty, too long, not
// UTF-8 or with NUL, the write is refused with an error saying why.
func TestStepNameIsChecked(t *testing.T) {
	s := pgtest.Store(t, drv, lease.Options{})
	ctx := context.Background()
	ref := claimByEvent(t, s, "a")["a"]
	for name, want := range map[string]string{
		"": "name is empty",
		strings.Repeat("x", lease.MaxStepNameBytes+1): "at most 200",
		"bad\xff": "not valid UTF-8",
		"nul\x00": "contains NUL",
	} {
		if _, err := s.Write(ctx, lease.Step(ref, name, []byte("v"))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("step named %q: %v; want an error containing %q", name, err, want)
		}
	}
	if row := getRow(t, s, ref.ID); row.Steps != nil {
		t.Errorf("row after the refused steps: %+v; want none", row.Steps)
	}
	if _, err := s.Write(ctx, lease.Step(ref, strings.Repeat("é", lease.MaxStepNameBytes/2), nil)); err != nil {
		t.Errorf("a step named with %d bytes: %v; want it recorded", lease.MaxStepNameBytes, err)
	}
}

// Steps are batched: one WriteMany records the steps of many claims in one
// statement, and two steps of one claim in one call both (a statement
// records one step a row, so the second goes in the next); a stale claim's
// step in the batch is rejected alone.
func TestStepsAreBatched(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		c := claimByEvent(t, s, "a", "b", "stale")
		stale := c["stale"]
		if _, err := leasetest.NewerGeneration(ctx, s, stale.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		res, err := s.WriteMany(ctx,
			lease.Step(c["a"], "one", []byte("a1")), lease.Step(c["b"], "one", []byte("b1")),
			lease.Step(c["a"], "two", []byte("a2")), lease.Step(stale, "one", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []lease.Verdict{lease.VerdictAccepted, lease.VerdictAccepted, lease.VerdictAccepted, lease.VerdictLost} {
			if res[i].Verdict != want {
				t.Errorf("write %d: %+v; want %v", i, res[i], want)
			}
		}
		for ref, want := range map[leasework.Ref]string{c["a"]: "one=a1 two=a2", c["b"]: "one=b1", stale: ""} {
			var got []string
			for _, st := range getRow(t, s, ref.ID).Steps {
				got = append(got, st.Name+"="+string(st.Value))
			}
			slices.Sort(got)
			if strings.Join(got, " ") != want {
				t.Errorf("row %d's steps %q; want %q", ref.ID, got, want)
			}
		}
	})
}

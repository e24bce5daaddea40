package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/leasework/leasework/lease"
)

// shownIDs is how many requeued ids the table output names; -json names all.
const shownIDs = 20

type requeueCmd struct {
	ids   idList
	kinds kindList
	all   bool
	extra int
}

func (r *requeueCmd) flags(fs *flag.FlagSet) {
	fs.Var(&r.ids, "id", "requeue the FAILED row with this `id`; repeat or separate with commas")
	fs.Var(&r.kinds, "kind", "requeue every FAILED row of this `kind`; repeat for more kinds")
	fs.BoolVar(&r.all, "all", false, "requeue every FAILED row")
	fs.IntVar(&r.extra, "extra-attempts", 0, "allow `N` attempts more than each row has used (default: reset the attempt count, restoring the whole budget)")
}

func (r *requeueCmd) check() error {
	n := 0
	for _, set := range []bool{len(r.ids) > 0, len(r.kinds) > 0, r.all} {
		if set {
			n++
		}
	}
	if n != 1 {
		return usagef("select the rows with exactly one of -id, -kind and -all")
	}
	if r.extra < 0 {
		return usagef("-extra-attempts is %d; it must not be negative (0 resets the attempt count)", r.extra)
	}
	return nil
}

type skippedJSON struct {
	ID     int64  `json:"id"`
	Reason string `json:"reason"`           // "not found" or "not FAILED"
	Status string `json:"status,omitempty"` // the row's status, when it exists
}

type requeueJSON struct {
	Count    int     `json:"count"`
	Requeued []int64 `json:"requeued"`
	// Skipped lists the rows named by -id that were not requeued.
	Skipped []skippedJSON `json:"skipped"`
}

func (r *requeueCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	ids, err := st.Requeue(ctx, lease.RequeueRequest{
		IDs: r.ids, Kinds: r.kinds, All: r.all, ExtraAttempts: r.extra,
	})
	if err != nil {
		return err
	}
	res := requeueJSON{Count: len(ids), Requeued: ids, Skipped: []skippedJSON{}}
	if res.Requeued == nil {
		res.Requeued = []int64{}
	}
	slices.Sort(res.Requeued)
	for _, id := range r.ids {
		if slices.Contains(ids, id) {
			continue
		}
		sk, err := skipReason(ctx, st, id)
		if err != nil {
			return err
		}
		res.Skipped = append(res.Skipped, sk)
	}
	if out.json {
		return out.JSON(res)
	}
	if err := out.Linef("%s", requeuedLine(res.Requeued, r.extra)); err != nil {
		return err
	}
	for _, sk := range res.Skipped {
		msg := "it does not exist"
		if sk.Status != "" {
			msg = fmt.Sprintf("it is %s, not FAILED", sk.Status)
		}
		if err := out.Linef("not requeued: row %d: %s", sk.ID, msg); err != nil {
			return err
		}
	}
	return nil
}

// skipReason says why the row id named by -id was not requeued.
func skipReason(ctx context.Context, st *lease.Store, id int64) (skippedJSON, error) {
	row, err := st.Get(ctx, id)
	if errors.Is(err, lease.ErrNotFound) {
		return skippedJSON{ID: id, Reason: "not found"}, nil
	}
	if err != nil {
		return skippedJSON{}, err
	}
	return skippedJSON{ID: id, Reason: "not FAILED", Status: string(row.Status)}, nil
}

func requeuedLine(ids []int64, extra int) string {
	noun := "rows"
	if len(ids) == 1 {
		noun = "row"
	}
	line := fmt.Sprintf("requeued %d %s", len(ids), noun)
	if len(ids) == 0 {
		return line
	}
	if extra == 0 {
		line += " (attempt count reset)"
	} else {
		line += fmt.Sprintf(" (%d more attempts each)", extra)
	}
	shown := ids[:min(len(ids), shownIDs)]
	strs := make([]string, len(shown))
	for i, id := range shown {
		strs[i] = itoa(id)
	}
	line += ": " + strings.Join(strs, ", ")
	if more := len(ids) - len(shown); more > 0 {
		line += fmt.Sprintf(" and %d more (-json lists all)", more)
	}
	return line
}

// idList is the value of -id: row ids, from repeated flags or comma lists,
// without duplicates.
type idList []int64

func (l *idList) String() string {
	strs := make([]string, len(*l))
	for i, id := range *l {
		strs[i] = itoa(id)
	}
	return strings.Join(strs, ",")
}

func (l *idList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		id, err := strconv.ParseInt(part, 10, 64)
		if err != nil || id < 1 {
			return fmt.Errorf("%q is not a row id (a positive integer)", part)
		}
		if !slices.Contains(*l, id) {
			*l = append(*l, id)
		}
	}
	return nil
}

// kindList is the value of -kind: kinds from repeated flags. A kind may
// contain any character, commas included, so it is never split.
type kindList []string

func (l *kindList) String() string { return strings.Join(*l, " ") }

func (l *kindList) Set(s string) error {
	if s == "" {
		return errors.New("a kind must not be empty")
	}
	if !slices.Contains(*l, s) {
		*l = append(*l, s)
	}
	return nil
}

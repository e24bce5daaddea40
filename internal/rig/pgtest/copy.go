package pgtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/lease"
)

// CopyBatch is a batch that uses every column an enqueue writes, with
// texts that a COPY's text format must escape, keys whose order depends
// on the collation, and due times whose nanoseconds the server rounds;
// prefix starts its event ids and keys.
func CopyBatch(prefix string, runAt func(i int) time.Time) []lease.Event {
	keys := []string{"b", "B", "", "a", "é", "_x", "b", "", "a\tb"}
	ids := []string{"plain", "tab\there", "new\nline", `back\slash`, `\N`, "", "quote'\"", "ünï", "cr\rlf"}
	var events []lease.Event
	for i := range keys {
		e := lease.Event{
			Kind:     "k" + fmt.Sprint(i%2),
			Payload:  []byte(fmt.Sprintf("\x00\t\n\\%d\xff", i)),
			Queue:    []string{"", "other"}[i%2],
			Priority: i % 3,
		}
		if ids[i] != "" {
			e.EventID = prefix + ids[i]
		}
		if keys[i] != "" {
			e.Key = prefix + keys[i]
		}
		if i%3 == 0 {
			e.MaxAttempts = 3 + i
		}
		if i%4 == 1 {
			e.Metadata = map[string]string{"tab\t": "new\nline", `back\`: `\N`, "q": `"'`}
		}
		if i == 3 {
			e.Payload = nil
		}
		if runAt != nil {
			e.RunAt = runAt(i)
		}
		events = append(events, e)
	}
	return events
}

// CompareRows checks that the rows of in (inserted) and cp (copied), the
// same batch with prefixes ins: and cp:, hold the same values and are in
// the same order.
func CompareRows(t *testing.T, s *lease.Store, in, cp []lease.Enqueued) {
	t.Helper()
	ctx := context.Background()
	if len(in) != len(cp) {
		t.Fatalf("%d events inserted, %d copied", len(in), len(cp))
	}
	type got struct {
		row lease.Row
		i   int
	}
	var rowsIn, rowsCp []got
	for i := range in {
		if in[i].Duplicate != cp[i].Duplicate || (in[i].ID == 0) != (cp[i].ID == 0) || (in[i].EventID == "") != (cp[i].EventID == "") {
			t.Errorf("event %d: inserted %+v, copied %+v; want the same outcome", i, in[i], cp[i])
			continue
		}
		a, err := s.Get(ctx, in[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Get(ctx, cp[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		rowsIn, rowsCp = append(rowsIn, got{a, i}), append(rowsCp, got{b, i})
		if a.EventID != in[i].EventID || b.EventID != cp[i].EventID {
			t.Errorf("event %d: rows of event ids %q and %q; want %q and %q", i, a.EventID, b.EventID, in[i].EventID, cp[i].EventID)
		}
		if strings.HasPrefix(a.EventID, "ins:") != strings.HasPrefix(b.EventID, "cp:") ||
			strings.TrimPrefix(a.EventID, "ins:") != strings.TrimPrefix(b.EventID, "cp:") && strings.HasPrefix(a.EventID, "ins:") {
			t.Errorf("event %d: event ids %q and %q; want the same after the prefix", i, a.EventID, b.EventID)
		}
		if strings.TrimPrefix(a.Key, "ins:") != strings.TrimPrefix(b.Key, "cp:") || a.Kind != b.Kind || string(a.Payload) != string(b.Payload) ||
			a.Status != b.Status || a.MaxAttempts != b.MaxAttempts || a.Queue != b.Queue || a.Priority != b.Priority ||
			!maps.Equal(a.Metadata, b.Metadata) || (a.Metadata == nil) != (b.Metadata == nil) || a.Payload == nil || b.Payload == nil {
			t.Errorf("event %d:\ninserted %+v\ncopied   %+v", i, a, b)
		}
		if !a.NextAttemptAt.Equal(b.NextAttemptAt) && !(a.NextAttemptAt.Equal(a.CreatedAt) && b.NextAttemptAt.Equal(b.CreatedAt)) {
			t.Errorf("event %d: due at %v inserted, %v copied (created at %v and %v); want the same time, or each its statement's",
				i, a.NextAttemptAt, b.NextAttemptAt, a.CreatedAt, b.CreatedAt)
		}
	}
	byID := func(a, b got) int { return int(a.row.ID - b.row.ID) }
	slices.SortFunc(rowsIn, byID)
	slices.SortFunc(rowsCp, byID)
	var orderIn, orderCp []int
	for k := range rowsIn {
		orderIn, orderCp = append(orderIn, rowsIn[k].i), append(orderCp, rowsCp[k].i)
	}
	if !slices.Equal(orderIn, orderCp) {
		t.Errorf("events by row id: inserted %v, copied %v; want the same order", orderIn, orderCp)
	}
}

package lease_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// TestByIDKeepsTheHighestGenerationOfAnID checks the per-claim parameter
// of the batched guarded writes: valid JSON for any text, one entry per id,
// and for an id named twice the entry of the higher generation, the only
// one that can own the row.
func TestByIDKeepsTheHighestGenerationOfAnID(t *testing.T) {
	refs := []leasework.Ref{{ID: 7, Generation: 2}, {ID: 3, Generation: 1}, {ID: 7, Generation: 5}, {ID: 7, Generation: 4}}
	texts := []string{"a", "quote \" backslash \\ newline \n tab \t", "é 😀 \u2028", "d"}
	got := lease.ByID(refs, func(i int) []any { return []any{int64(i * 10), texts[i]} })
	var m map[string][]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	want := map[string][]any{
		"7": {float64(5), float64(20), texts[2]},
		"3": {float64(1), float64(10), texts[1]},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("ByID = %s\nparsed %v, want %v", got, m, want)
	}
	if got := lease.ByID(refs[:2], nil); got != `{"7":[2],"3":[1]}` {
		t.Errorf("ByID without values = %s", got)
	}
}

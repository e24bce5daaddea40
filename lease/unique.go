package lease

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasework/leasework"
)

// Unique makes an event unique by what it asks for rather than by an id
// the producer must invent: its event id is derived from its kind and the
// parts of the event Unique names, so two enqueues of the same arguments
// (in the same period, in the same queue) get the same id, and the second
// gets the result of any duplicate event id — leasework.ErrDuplicateEvent,
// or Enqueued.Duplicate with [EnqueueOptions].SkipDuplicates — enforced by
// the database's unique index of event ids, under concurrency as across
// producers and versions.
//
// The derived id is "unique:" + the kind + ":" + 32 hex digits of a
// SHA-256 over the parts named (and, with ReleaseOn, "~" and a letter per
// status that frees it); it is the row's event id ([Enqueued].EventID,
// [Row].EventID), and it lasts as an event id does — while the row is
// kept, whatever its status (pending, FAILED, or DONE until retention
// deletes it: the framework's DedupeWindow) — unless ReleaseOn frees it
// sooner. An event that gives Unique gives no EventID.
//
// The zero Unique makes the kind alone the key: at most one such event of
// the kind at a time.
type Unique struct {
	// ByArgs makes the payload part of the key: the whole payload, or,
	// with ArgKeys, only those top-level fields of it. A payload that is
	// JSON counts by its value, not its spelling: whitespace and the order
	// of an object's fields do not change the key. A payload that is not
	// JSON counts byte for byte.
	ByArgs bool
	// ArgKeys names the top-level fields of a JSON object payload that
	// make the key (a field absent counts as null); the others do not.
	// Needs ByArgs, and a payload that is a JSON object.
	ArgKeys []string
	// ByPeriod, when positive, makes the period the event falls in part
	// of the key: its RunAt, or the enqueuing machine's clock when it has
	// none, rounded down to a multiple of ByPeriod since the Unix epoch.
	// The same arguments enqueued in the next period are a new event.
	ByPeriod time.Duration
	// ByQueue makes the event's queue part of the key: the same arguments
	// in two queues are two events.
	ByQueue bool
	// ReleaseOn names finished statuses (leasework.StatusDone,
	// StatusFailed, StatusDiscarded) that free the arguments: once the
	// event ends in one of them, in the transaction that ends it, an
	// enqueue of the same arguments is a new event. Nil frees them only
	// when the row is deleted. A pending event (READY, WAITING,
	// INPROGRESS) always holds its arguments; an event requeued after
	// its arguments were freed does not take them again. The derived id
	// says which statuses free it, so events that differ in ReleaseOn are
	// not duplicates of one another.
	ReleaseOn []leasework.Status
}

// releaseLetters are the letters of the finished statuses in a derived
// id's "~" suffix, in the order written (migration 27 reads them).
var releaseLetters = []releaseLetter{{leasework.StatusDone, 'D'}, {leasework.StatusFailed, 'F'}, {leasework.StatusDiscarded, 'X'}}

type releaseLetter struct {
	status leasework.Status
	letter byte
}

// uniqueID returns the event id Unique derives for e, enqueued at now
// (when e has no RunAt).
func uniqueID(e Event, now time.Time) (string, error) {
	u := e.Unique
	if e.EventID != "" {
		return "", errors.New("both EventID and Unique are given; Unique derives the event id")
	}
	if u.ByPeriod < 0 {
		return "", fmt.Errorf("the Unique.ByPeriod %v is negative", u.ByPeriod)
	}
	if len(u.ArgKeys) > 0 && !u.ByArgs {
		return "", errors.New("the Unique.ArgKeys are given without Unique.ByArgs")
	}
	h := sha256.New()
	part := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	part([]byte(e.Kind))
	if u.ByQueue {
		q := e.Queue
		if q == "" {
			q = DefaultQueue
		}
		part([]byte("queue:" + q))
	}
	if u.ByPeriod > 0 {
		at := e.RunAt
		if at.IsZero() {
			at = now
		}
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(at.UnixNano()/int64(u.ByPeriod)))
		part(append([]byte("period:"), n[:]...))
	}
	if u.ByArgs {
		args, err := uniqueArgs(e.Payload, u.ArgKeys)
		if err != nil {
			return "", err
		}
		part(append([]byte("args:"), args...))
	}
	id := "unique:" + e.Kind + ":" + hex.EncodeToString(h.Sum(nil)[:16])
	if len(u.ReleaseOn) == 0 {
		return id, nil
	}
	var suffix []byte
	for _, st := range u.ReleaseOn {
		if !slices.ContainsFunc(releaseLetters, func(r releaseLetter) bool { return r.status == st }) {
			return "", fmt.Errorf("the Unique.ReleaseOn status %q is not a finished one (DONE, FAILED, DISCARDED)", st)
		}
	}
	for _, r := range releaseLetters {
		if slices.Contains(u.ReleaseOn, r.status) {
			suffix = append(suffix, r.letter)
		}
	}
	return id + "~" + string(suffix), nil
}

// uniqueArgs returns the payload's part of a unique key: its JSON value
// written canonically (objects' fields sorted, no whitespace, numbers as
// written), only the fields keys names when there are any; or the payload
// itself when it is not JSON and no field is named.
func uniqueArgs(payload []byte, keys []string) ([]byte, error) {
	if len(keys) > 0 {
		// Only the fields named are decoded in full.
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
			return nil, errors.New("the Unique.ArgKeys need a payload that is a JSON object")
		}
		picked := make(map[string]any, len(keys))
		for _, k := range keys {
			raw, ok := obj[k]
			if !ok {
				picked[k] = nil
				continue
			}
			v, err := decodeJSON(raw)
			if err != nil {
				return nil, err
			}
			picked[k] = v
		}
		b, err := json.Marshal(picked)
		if err != nil {
			return nil, err
		}
		return append([]byte("json:"), b...), nil
	}
	v, err := decodeJSON(payload)
	if err != nil {
		return append([]byte("raw:"), payload...), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte("json:"), b...), nil
}

// decodeJSON decodes one JSON value, its numbers kept as written.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

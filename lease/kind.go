package lease

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// Codec encodes the arguments of a [Kind] into an event's payload, and
// decodes them back.
type Codec[T any] interface {
	Encode(args T) ([]byte, error)
	Decode(payload []byte) (T, error)
}

// JSON is the default [Codec]: encoding/json.
type JSON[T any] struct{}

// Encode marshals args with encoding/json.
func (JSON[T]) Encode(args T) ([]byte, error) { return json.Marshal(args) }

// Decode unmarshals payload with encoding/json.
func (JSON[T]) Decode(payload []byte) (T, error) {
	var args T
	err := json.Unmarshal(payload, &args)
	return args, err
}

// Kind is a kind of event whose payload carries arguments of type T:
// declared once, shared by the code that enqueues it and the worker that
// handles it (framework.HandleKind), so neither handles bytes.
//
//	var SendEmail = lease.Kind[Email]{Name: "email.send", Queue: "mail", MaxAttempts: 5}
//
//	_, err := SendEmail.Enqueue(ctx, store, tx, Email{To: "ada@example.com"})
//
// Its other fields are the defaults of its events: their queue, priority
// and attempt budget.
type Kind[T any] struct {
	// Name is the events' kind. Required; see [ValidateKind].
	Name string
	// Queue, Priority and MaxAttempts are given to each event, as in
	// [Event]: empty, zero and zero mean the default queue, priority 0 and
	// the store's budget.
	Queue       string
	Priority    int
	MaxAttempts int
	// Codec encodes the arguments. Nil means [JSON].
	Codec Codec[T]
}

func (k Kind[T]) codec() Codec[T] {
	if k.Codec == nil {
		return JSON[T]{}
	}
	return k.Codec
}

// Event returns an event of kind k carrying args, with k's queue, priority
// and budget; set its EventID, Key or RunAt before enqueueing it as
// needed.
func (k Kind[T]) Event(args T) (Event, error) {
	payload, err := k.codec().Encode(args)
	if err != nil {
		return Event{}, fmt.Errorf("lease: kind %q: encode: %w", k.Name, err)
	}
	return Event{Kind: k.Name, Payload: payload, Queue: k.Queue, Priority: k.Priority, MaxAttempts: k.MaxAttempts}, nil
}

// Enqueue enqueues one event of kind k per args, in tx, as [Store.Enqueue]
// does, with new random event ids. Use [Kind.Event] and [Store.Enqueue]
// for events that need ids, keys or a start time.
func (k Kind[T]) Enqueue(ctx context.Context, s *Store, tx *sql.Tx, args ...T) ([]Enqueued, error) {
	events := make([]Event, len(args))
	for i, a := range args {
		e, err := k.Event(a)
		if err != nil {
			return nil, err
		}
		events[i] = e
	}
	return s.Enqueue(ctx, tx, events...)
}

// Decode decodes an event's payload into k's arguments.
func (k Kind[T]) Decode(payload []byte) (T, error) {
	args, err := k.codec().Decode(payload)
	if err != nil {
		return args, fmt.Errorf("lease: kind %q: decode the payload: %w", k.Name, err)
	}
	return args, nil
}

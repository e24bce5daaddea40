package lease

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on the text a store writes.
const (
	// MaxErrorBytes bounds the error text stored with a retried or failed
	// row ([Retry], [Snooze], [Fail]). Longer texts are cut
	// on a character boundary and end with "…".
	MaxErrorBytes = 64 << 10

	// MaxKindBytes bounds an event kind.
	MaxKindBytes = 255

	// MaxEventIDBytes bounds an event id.
	MaxEventIDBytes = 1024

	// MaxKeyBytes bounds an event's key.
	MaxKeyBytes = 1024

	// MaxPartitionBytes bounds an event's partition key.
	MaxPartitionBytes = 1024

	// MaxQueueBytes bounds a queue's name.
	MaxQueueBytes = 128

	// MaxMetadataBytes bounds an event's metadata, its keys and values
	// together.
	MaxMetadataBytes = 16 << 10
)

// DefaultQueue is the queue of events enqueued without one, and the queue a
// claim reads when given none.
const DefaultQueue = "default"

// MaxPriority is the last priority level: an event's priority runs from 0,
// the default and the first to be claimed, to MaxPriority.
const MaxPriority = 9

// ValidateKind reports whether kind can name events: non-empty, valid UTF-8,
// no NUL byte, at most [MaxKindBytes]. PostgreSQL's text type refuses NUL
// bytes and invalid UTF-8, so a kind that breaks these rules could never be
// enqueued or claimed.
func ValidateKind(kind string) error {
	if kind == "" {
		return fmt.Errorf("lease: kind is empty")
	}
	if err := validateText("kind", kind, MaxKindBytes); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// ValidateQueue reports whether queue can name a queue: not empty, valid
// UTF-8 without NUL bytes, at most [MaxQueueBytes]. (An event or a claim
// given no queue is in [DefaultQueue].)
func ValidateQueue(queue string) error {
	if queue == "" {
		return fmt.Errorf("lease: queue is empty")
	}
	if err := validateText("queue", queue, MaxQueueBytes); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// ValidatePartition reports whether partition can name a partition
// ([Event].Partition, the Name of a [ScopePartition] limit): not empty,
// valid UTF-8 without NUL bytes, at most [MaxPartitionBytes]. (An event
// of no partition has none; the default partition limit's Name is empty.)
func ValidatePartition(partition string) error {
	if partition == "" {
		return fmt.Errorf("lease: partition is empty")
	}
	if err := validateText("partition", partition, MaxPartitionBytes); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// validateText checks a text value given by a caller: valid UTF-8, no NUL
// byte, at most maxBytes. The error starts with field.
func validateText(field, s string, maxBytes int) error {
	switch {
	case len(s) > maxBytes:
		return fmt.Errorf("%s is %d bytes long; at most %d are allowed", field, len(s), maxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", field, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte, which PostgreSQL text cannot hold", field, s)
	}
	return nil
}

// CleanText makes s storable as PostgreSQL text of at most maxBytes bytes:
// invalid UTF-8 becomes U+FFFD, NUL bytes become U+FFFD, and a text longer
// than maxBytes is cut on a character boundary and ends with "…" (the
// result, "…" included, is at most maxBytes long). Error texts come from
// anywhere; cleaning them means one odd text can never make its write fail.
func CleanText(s string, maxBytes int) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 && len(s) <= maxBytes {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= maxBytes {
		return s
	}
	const ellipsis = "…"
	if maxBytes < len(ellipsis) {
		return ""
	}
	cut := maxBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

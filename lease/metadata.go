package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// MetadataSize is the size of m as [MaxMetadataBytes] bounds it: its keys'
// and values' bytes.
func MetadataSize(m map[string]string) int {
	size := 0
	for k, v := range m {
		size += len(k) + len(v)
	}
	return size
}

// checkMetadata checks an event's metadata before it is sent.
func checkMetadata(m map[string]string) error {
	if len(m) == 0 {
		return nil // most events: no keys to sort
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "" {
			//lint:ignore ST1005 the message starts with the field's name, Metadata
			return errors.New("Metadata has an empty key")
		}
		if err := validateText("Metadata key", k, MaxMetadataBytes); err != nil {
			return err
		}
		if err := validateText(fmt.Sprintf("Metadata[%q]", k), m[k], MaxMetadataBytes); err != nil {
			return err
		}
	}
	if size := MetadataSize(m); size > MaxMetadataBytes {
		//lint:ignore ST1005 the message starts with the field's name, Metadata
		return fmt.Errorf("Metadata holds %d bytes of keys and values; at most %d are allowed", size, MaxMetadataBytes)
	}
	return nil
}

// metadataText is m as the JSON text the insert stores, or "" for none.
func metadataText(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(m) // keys and values are checked UTF-8 strings
	if err != nil {
		panic("lease: metadata: " + err.Error())
	}
	return string(b)
}

// parseMetadata reads the stored metadata, "" meaning none.
func parseMetadata(text string) (map[string]string, error) {
	if text == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return nil, fmt.Errorf("metadata is not an object of strings: %w", err)
	}
	return m, nil
}

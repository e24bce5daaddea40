package main

import (
	"os"
	"testing"
)

// procMemory reads this process's own figures; the peak is at least the
// current.
func TestProcMemory(t *testing.T) {
	rss, hwm, err := procMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || hwm < rss {
		t.Errorf("VmRSS %d kB, VmHWM %d kB; want 0 < VmRSS ≤ VmHWM", rss, hwm)
	}
}

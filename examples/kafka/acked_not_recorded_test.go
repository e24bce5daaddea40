//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The child process's side of the test, chosen by environment variables.
const (
	envRole    = "LEASEWORK_KAFKA_TEST_ROLE"
	envSchema  = "LEASEWORK_KAFKA_TEST_SCHEMA"
	envBrokers = "LEASEWORK_KAFKA_TEST_BROKERS"
	roleRelay  = "relay-until-killed"
)

// The test the lab article names and could not run: a publisher is killed
// after the broker acknowledged an event and before it recorded DONE. A
// child process runs a relay worker that publishes the event, prints the
// acknowledgment, and blocks; only then does the parent send SIGKILL. After
// the lease fixture expires, another worker claims the event with
// generation 2 and publishes it again. The topic holds two records with the
// same event id, generations 1 and 2; the row is DONE at generation 2; the
// consumer applies the event once.
func TestAckedButNotRecorded(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		if os.Getenv(envRole) == roleRelay {
			relayUntilKilled(t, drv)
			return
		}
		e := newEnv(t, drv)
		o := order{ID: "1", Customer: "customer-7", AmountCents: 1234}
		row := e.place(o)

		cmd := exec.CommandContext(e.ctx, os.Args[0], "-test.run="+runPattern(t.Name()), "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), envRole+"="+roleRelay, envSchema+"="+e.store.Schema(),
			envBrokers+"="+strings.Join(e.brokers, ","))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child: %v", err)
		}
		defer cmd.Process.Kill() // only matters if the test fails before the kill

		var ack published
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "LEASEWORK-ACKED event=%s kind=%s generation=%d partition=%d offset=%d",
				&ack.EventID, &ack.Kind, &ack.Generation, &ack.Partition, &ack.Offset); err == nil {
				break
			}
		}
		if ack.EventID == "" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child exited before the broker acknowledged (scan error %v)", sc.Err())
		}
		if ack.EventID != o.eventID() || ack.Generation != 1 {
			t.Fatalf("child published %s generation %d; want %s generation 1", ack.EventID, ack.Generation, o.eventID())
		}

		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL: %v", err)
		}
		go func() { // drain, so the child is never blocked on a full pipe
			for sc.Scan() {
			}
		}()
		err = cmd.Wait()
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child did not die of SIGKILL: %v (%v)", err, cmd.ProcessState)
		}
		t.Logf("child %d died of SIGKILL after the broker acknowledged %s generation 1 at %s[%d]@%d",
			cmd.Process.Pid, ack.EventID, testTopic, ack.Partition, ack.Offset)

		// Acknowledged, not recorded: the record is in the topic, the row
		// still INPROGRESS under the dead worker's claim.
		if recs := e.records(); len(recs) != 1 || recs[0] != ack {
			t.Fatalf("topic after the kill: %+v; want exactly the acknowledged record %+v", recs, ack)
		}
		e.wantRow(o.eventID(), leasework.StatusInProgress, 1)

		if err := leasetest.ExpireLease(e.ctx, e.store, row.ID); err != nil { // the dead worker's lease runs out
			t.Fatal(err)
		}
		w := e.worker("relay-b", &relay{client: e.producer(), topic: testTopic}, framework.Config{}, framework.RetryPolicy{})
		stop := e.start(w)
		waitFor(t, "the event to be DONE again", func() (bool, error) {
			r, err := e.store.GetByEventID(e.ctx, o.eventID())
			return err == nil && r.Status == leasework.StatusDone, err
		})
		stop()
		e.wantRow(o.eventID(), leasework.StatusDone, 2)
		if c := w.Counters(); c.Reclaimed != 1 || c.Completed != 1 {
			t.Fatalf("second worker: reclaimed %d, completed %d; want 1 and 1", c.Reclaimed, c.Completed)
		}

		recs := e.records()
		if len(recs) != 2 {
			t.Fatalf("topic holds %d records: %+v; want 2", len(recs), recs)
		}
		for i, r := range recs {
			if r.EventID != o.eventID() || r.Kind != kindOrderPlaced || r.Generation != int64(i+1) || r.Partition != ack.Partition {
				t.Fatalf("record %d: %+v; want %s generation %d in partition %d", i, r, o.eventID(), i+1, ack.Partition)
			}
		}
		t.Logf("topic: %s generation %d at offset %d, generation %d at offset %d",
			o.eventID(), recs[0].Generation, recs[0].Offset, recs[1].Generation, recs[1].Offset)

		c := e.consume(len(recs))
		if c.Applied != 1 || c.Duplicates != 1 {
			t.Fatalf("consumer: %+v; want 1 applied and 1 duplicate skipped", c)
		}
		e.wantApplied(o)
	})
}

// relayUntilKilled is the child's side: a relay worker whose handler, once
// the broker acknowledged the record, prints the acknowledgment and blocks
// before returning, so DONE is never written.
func relayUntilKilled(t *testing.T, drv leasework.Driver) {
	store, err := lease.New(pgtest.Open(t, drv), drv, lease.Options{Schema: os.Getenv(envSchema)})
	if err != nil {
		t.Fatal(err)
	}
	e := attachEnv(t, store, splitBrokers(os.Getenv(envBrokers)))
	rl := &relay{client: e.producer(), topic: testTopic, published: func(c *leasework.Claim, r *kgo.Record) {
		fmt.Printf("LEASEWORK-ACKED event=%s kind=%s generation=%d partition=%d offset=%d\n",
			c.EventID, c.Kind, c.Generation, r.Partition, r.Offset)
		os.Stdout.Sync()
		time.Sleep(10 * time.Minute) // until the parent's SIGKILL
	}}
	e.start(e.worker("relay-a", rl, framework.Config{}, framework.RetryPolicy{}))
	time.Sleep(10 * time.Minute)
	t.Fatal("child was not killed")
}

// runPattern is a -test.run pattern that matches exactly the named subtest.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

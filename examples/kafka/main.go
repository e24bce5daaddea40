// Command kafka is an outbox relay from PostgreSQL to Kafka built on
// leasework, with a consumer that applies each event once.
//
// A shop places orders; each order and its "order.placed" event commit in one
// transaction (the transactional outbox). A leasework worker claims the
// events and publishes each to a Kafka topic with franz-go, acks=all and an
// idempotent producer, and marks it DONE only after the broker acknowledged
// it. The customer is the event's key: one customer's events are published
// one at a time, in the order their orders committed. A consumer reads the
// topic and adds each order to its customer's totals in one transaction with
// an inbox row keyed by the event id, so a record delivered twice is applied
// once, and checks each customer's orders arrive in order.
//
// With no -brokers it starts an in-process Kafka broker (kfake); with no -dsn
// and no LEASEWORK_DSN, a throwaway PostgreSQL. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.brokers, "brokers", "", "Kafka seed brokers, host:port separated by commas (default: start an in-process broker)")
	flag.StringVar(&o.topic, "topic", "leasework.orders", "topic to publish to and consume from (created if missing)")
	flag.StringVar(&o.dsn, "dsn", "", "PostgreSQL URL (default: $LEASEWORK_DSN, else a throwaway server)")
	flag.StringVar(&o.schema, "schema", "leasework_kafka", "schema for the outbox, orders, inbox and totals tables")
	flag.StringVar(&o.group, "group", "leasework-kafka-example", "consumer group of the consumer")
	flag.IntVar(&o.events, "events", 10, "orders to place, each with one event")
	flag.IntVar(&o.customers, "customers", 3, "customers the orders are spread over; the customer is the record key")
	flag.IntVar(&o.partitions, "partitions", 3, "partitions of the topic when it is created")
	flag.BoolVar(&o.redeliver, "redeliver", false, "make the first publication of one event fail after the broker acknowledged it, to watch the consumer skip the duplicate")
	flag.DurationVar(&o.deliveryTimeout, "delivery-timeout", 10*time.Second, "how long the producer retries one record before the worker's retry policy takes over")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for every event to be published and consumed")
	flag.BoolVar(&o.verbose, "v", false, "log the worker's and consumer's info messages on stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kafka: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		stop()
		os.Exit(1)
	}
}

// options are the program's flags.
type options struct {
	brokers, topic, dsn, schema, group string
	events, customers, partitions      int
	redeliver, verbose                 bool
	deliveryTimeout, timeout           time.Duration
}

func (o options) validate() error {
	switch {
	case o.topic == "":
		return errors.New("-topic is empty")
	case o.group == "":
		return errors.New("-group is empty")
	case o.events < 1:
		return fmt.Errorf("-events is %d; it must be at least 1", o.events)
	case o.customers < 1:
		return fmt.Errorf("-customers is %d; it must be at least 1", o.customers)
	case o.partitions < 1 || o.partitions > 1<<15:
		return fmt.Errorf("-partitions is %d; it must be between 1 and 32768", o.partitions)
	case o.deliveryTimeout < time.Second:
		return fmt.Errorf("-delivery-timeout is %v; it must be at least 1s", o.deliveryTimeout)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout is %v; it must be positive", o.timeout)
	}
	return nil // the schema name is checked by lease.New
}

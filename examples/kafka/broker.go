package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startFakeBroker starts an in-process Kafka broker (franz-go's kfake) for
// when no cluster is given. It speaks the Kafka protocol on a local port and
// keeps everything in memory; Close stops it and forgets everything.
func startFakeBroker(opts ...kfake.Opt) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("start in-process kafka broker: %w", err)
	}
	return c, nil
}

// ensureTopic creates topic with the given partitions and the cluster's
// default replication factor, unless it exists already.
func ensureTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	_, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// splitBrokers parses the -brokers flag: host:port pairs separated by commas.
func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

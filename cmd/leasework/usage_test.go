package main

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := must(t, exitOK, args...)
		for _, want := range []string{"migrate", "stats", "list", "requeue", "discard", "-dsn", "LEASEWORK_DSN", "-json", "Exit status", "requeued 0 rows"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("leasework %s: usage text does not mention %q:\n%s", args[0], want, r.stdout)
			}
		}
	}
	for _, args := range [][]string{{"help", "list"}, {"list", "-h"}} {
		r := must(t, exitOK, args...)
		for _, want := range []string{"Usage: leasework list", "-status", "-after", "-limit", "-held", "-id", "why it is not running", "-dsn", "Exit status"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("leasework %s: usage text does not mention %q:\n%s", strings.Join(args, " "), want, r.stdout)
			}
		}
	}
	r := must(t, exitOK, "help", "discard")
	for _, want := range []string{"-id", "-generation", "DISCARDED", "list -held"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("leasework help discard does not mention %q:\n%s", want, r.stdout)
		}
	}
	r = must(t, exitOK, "help", "limits")
	for _, want := range []string{"-kind", "-queue", "-max", "-clear", "-by", "-changes", "-n", "LIVE/MAX", "HELD BACK",
		"-rate M/PERIOD", "-clear-rate", "rate:kind", "rate:partition", "MAX/PERIOD", "RECENT", "NEXT ROOM", "PERIOD", "held_back",
		"-weight N", "-clear-weight", "-aging D", "-clear-aging", "ACTIVE", "PARTITION", "AFTER", "(default)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("leasework help limits does not mention %q:\n%s", want, r.stdout)
		}
	}
	r = must(t, exitOK, "help", "requeue")
	for _, want := range []string{"-id", "-kind", "-all", "-extra-attempts"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("leasework help requeue does not mention %q:\n%s", want, r.stdout)
		}
	}
}

// TestUsageErrors checks that every mistake in a command line exits 2 with a
// message naming the problem, before anything is sent to the database: the
// DSN given points at a port nothing listens on, so a command that got as far
// as the database would exit 1 instead.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	const nowhere = "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5"
	cases := []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "list", "stats"}, "at most one command"},
		{[]string{"-json", "stats"}, "flags go after"},
		{[]string{"stats", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"stats", "extra"}, `unexpected argument "extra"`},
		{[]string{"stats", "-driver", "mysql"}, `-driver "mysql"`},
		{[]string{"stats", "-driver", "pgx", "-dsn", "::bad::"}, "bad -dsn"},
		{[]string{"stats", "-driver", "pq", "-dsn", "::bad::"}, "bad -dsn"},
		{[]string{"stats", "-schema", "bad schema"}, "Options.Schema"},
		{[]string{"stats", "-table", "a.b"}, "Options.Table"},
		{[]string{"migrate", "-schema", "Mixed_Case"}, `use lower case: PostgreSQL folds unquoted names to lower case, so Mixed_Case would be created as "Mixed_Case" and not found as Mixed_Case`},
		{[]string{"stats", "-table", "Events"}, `Options.Table "Events" has upper case`},
		{[]string{"stats", "-timeout", "-1s"}, "-timeout"},
		{[]string{"stats", "-timeout", "soon"}, "-timeout"},
		{[]string{"list", "-status", "PENDING"}, `-status "PENDING"`},
		{[]string{"list", "-held", "-status", "FAILED"}, "-held lists keys"},
		{[]string{"list", "-held", "-after", "3"}, "-held lists keys"},
		{[]string{"list", "-id", "3", "-status", "READY"}, "-id shows one row: it takes no -status"},
		{[]string{"list", "-id", "3", "-limit", "5"}, "-id shows one row: it takes no -limit"},
		{[]string{"list", "-id", "3", "-held"}, "-id shows one row: it takes no -held"},
		{[]string{"list", "-id", "0"}, "-id is 0; row ids are whole numbers from 1"},
		{[]string{"discard"}, "-id is 0"},
		{[]string{"discard", "-id", "3"}, "-generation is 0"},
		{[]string{"discard", "-id", "-3", "-generation", "1"}, "-id is -3"},
		{[]string{"discard", "-id", "x", "-generation", "1"}, "-id"},
		{[]string{"discard", "-id", "3", "-generation", "0"}, "-generation is 0"},
		{[]string{"list", "-limit", "0"}, "-limit is 0"},
		{[]string{"list", "-limit", "many"}, "-limit"},
		{[]string{"list", "-after", "-5"}, "-after is -5"},
		{[]string{"requeue"}, "exactly one of -id, -kind and -all"},
		{[]string{"requeue", "-id", "1", "-all"}, "exactly one of -id, -kind and -all"},
		{[]string{"requeue", "-kind", "k", "-id", "3"}, "exactly one of -id, -kind and -all"},
		{[]string{"requeue", "-id", "abc"}, `"abc" is not a row id`},
		{[]string{"requeue", "-id", "4,0"}, `"0" is not a row id`},
		{[]string{"requeue", "-id", "4,"}, `"" is not a row id`},
		{[]string{"requeue", "-kind", ""}, "kind must not be empty"},
		{[]string{"requeue", "-all", "-extra-attempts", "-1"}, "-extra-attempts is -1"},
		{[]string{"limits", "-max", "5"}, "name the limit to change: -kind K"},
		{[]string{"limits", "-clear"}, "name the limit to change: -kind K"},
		{[]string{"limits", "-kind", "k", "-queue", "q", "-max", "1"}, "give one of -kind and -queue, not both"},
		{[]string{"limits", "-kind", "send-email"}, "say what to do with the limit of kind send-email: -max N sets it, -clear removes it"},
		{[]string{"limits", "-kind", "k", "-max", "1", "-clear"}, "give one of -max N (set the limit) and -clear (remove it)"},
		{[]string{"limits", "-kind", "k", "-max", "-1"}, "-max is -1; it must be from 0 (no attempt starts: the kind is held) to 10000"},
		{[]string{"limits", "-queue", "q", "-max", "10001"}, "-max is 10001"},
		{[]string{"limits", "-kind", "k", "-max", "many"}, "-max"},
		{[]string{"limits", "-kind", "", "-max", "1"}, "-kind is empty; name the kind to limit"},
		{[]string{"limits", "-queue", "", "-clear"}, "-queue is empty; name the queue to limit (default for the default queue)"},
		{[]string{"limits", "-kind", "a\x00b", "-max", "1"}, "-kind: lease: kind"},
		{[]string{"limits", "-kind", "k", "-max", "1", "-by", ""}, "-by is empty"},
		{[]string{"limits", "-kind", "k", "-clear", "-by", "a\x00b"}, "-by"},
		{[]string{"limits", "-by", "alice"}, "-by names who sets or clears a limit"},
		{[]string{"limits", "-changes", "-kind", "k"}, "-changes lists the changes of every limit: it takes -n, not -kind"},
		{[]string{"limits", "-changes", "-n", "0"}, "-n is 0; it must be from 1 to 1000"},
		{[]string{"limits", "-changes", "-n", "1001"}, "-n is 1001"},
		{[]string{"limits", "-n", "5"}, "-n counts the changes that -changes lists; add -changes"},
		{[]string{"limits", "set", "kind:send-email", "5"}, `unexpected argument "set"`},
		{[]string{"limits", "-partition", "", "-max", "1"}, "-partition is empty; name the partition to limit, or give -partition-default"},
		{[]string{"limits", "-partition", "a", "-partition-default", "-max", "1"}, "give one of -partition and -partition-default, not both"},
		{[]string{"limits", "-kind", "k", "-queue", "q", "-partition", "p", "-clear"}, "give one of -kind and -queue and -partition, not more"},
		{[]string{"limits", "-partition-default"}, "say what to do with the default limit of the partitions: -max N sets it"},
		{[]string{"limits", "-partition", "acme"}, "say what to do with the limit of partition acme"},
		{[]string{"limits", "-partition-default=false", "-max", "1"}, "-partition-default=false names no limit"},
		{[]string{"limits", "-partition", "a\x00b", "-max", "1"}, "-partition: lease: partition"},
		{[]string{"limits", "-partition-default", "-max", "-1"}, "the partition is held"},
		{[]string{"limits", "-changes", "-partition-default"}, "it takes -n, not -partition-default"},
		{[]string{"list", "-id", "3", "-partition", "a"}, "-id shows one row: it takes no -partition"},
		{[]string{"list", "-held", "-partition", "a"}, "-held lists keys, not rows: it takes no -status, -kind, -queue, -partition or -after"},
		{[]string{"limits", "-rate", "1/s"}, "name the rate limit to change: -kind K (a kind, in every queue), -queue Q (a queue, of every kind), -partition P (a partition) or -partition-default (each partition without a rate limit of its own)"},
		{[]string{"limits", "-clear-rate"}, "name the rate limit to change"},
		{[]string{"limits", "-kind", "k", "-rate", "1/s", "-max", "2"}, "give one of -max N and -rate M/PERIOD, not both: each call makes one change"},
		{[]string{"limits", "-kind", "k", "-rate", "1/s", "-clear-rate"}, "give one of -rate M/PERIOD and -clear-rate, not both"},
		{[]string{"limits", "-kind", "k", "-max", "1", "-clear", "-clear-rate"}, "give one of -max N and -clear and -clear-rate, not more"},
		{[]string{"limits", "-partition", "", "-rate", "1/s"}, "-partition is empty; name the partition to limit, or give -partition-default for the default rate limit of the partitions"},
		{[]string{"limits", "-partition", "", "-clear-rate"}, "give -partition-default for the default rate limit of the partitions"},
		{[]string{"limits", "-partition", "a\x00b", "-rate", "1/s"}, "-partition: lease: partition"},
		{[]string{"limits", "-partition", "p", "-rate", "1/s", "-clear"}, "give one of -clear and -rate M/PERIOD, not both: each call makes one change"},
		{[]string{"limits", "-partition-default", "-rate", "1/s", "-clear-rate"}, "give one of -rate M/PERIOD and -clear-rate, not both"},
		{[]string{"limits", "-partition-default", "-rate", "0/s"}, `-rate: rate "0/s": 0 starts; it must be from 1 to 10000`},
		{[]string{"limits", "-partition", "p", "-rate", "5/0s"}, "it must be from 1ms to 24h0m0s"},
		{[]string{"limits", "-partition", "p", "-queue", "q", "-rate", "5/s"}, "give one of -queue and -partition, not both"},
		{[]string{"limits", "-partition", "acme"}, "-rate M/PERIOD sets the rate limit of partition acme, -clear-rate removes that"},
		{[]string{"limits", "-partition-default"}, "-rate M/PERIOD sets the default rate limit of the partitions, -clear-rate removes that"},
		{[]string{"limits", "-kind", "k", "-rate", "0/s"}, `-rate: rate "0/s": 0 starts; it must be from 1 to 10000`},
		{[]string{"limits", "-queue", "q", "-rate", "5"}, `-rate: rate "5": write it as M/PERIOD`},
		{[]string{"limits", "-queue", "q", "-rate", "5/25h"}, "it must be from 1ms to 24h0m0s"},
		{[]string{"limits", "-kind", "", "-rate", "5/s"}, "-kind is empty; name the kind to limit"},
		{[]string{"limits", "-kind", "k"}, "-rate M/PERIOD sets its rate limit, -clear-rate removes that"},
		{[]string{"limits", "-changes", "-rate", "1/s"}, "it takes -n, not -rate"},
		{[]string{"limits", "-by", "x"}, "(or -rate M/PERIOD or -clear-rate); or -queue Q with -weight N, -clear-weight, -aging D or -clear-aging"},
		{[]string{"limits", "-weight", "3"}, "name the fair queue: -queue Q (with -partition P for a partition's weight, without it for the queue's default)"},
		{[]string{"limits", "-partition", "acme", "-clear-weight"}, "name the fair queue: -queue Q"},
		{[]string{"limits", "-aging", "10m"}, "name the queue of the priority aging: -queue Q"},
		{[]string{"limits", "-kind", "k", "-weight", "3"}, "-weight N is for a fair queue's weight: name the queue with -queue Q, and a partition with -partition P (without it, the queue's default weight); a kind has no weight"},
		{[]string{"limits", "-queue", "q", "-partition-default", "-clear-weight"}, "-clear-weight is for a fair queue's weight"},
		{[]string{"limits", "-queue", "q", "-partition", "p", "-aging", "1m"}, "-aging D is for a queue's priority aging: name the queue with -queue Q alone (a kind or a partition has no aging of its own)"},
		{[]string{"limits", "-kind", "k", "-clear-aging"}, "-clear-aging is for a queue's priority aging"},
		{[]string{"limits", "-queue", "q", "-weight", "0"}, "-weight is 0; it must be from 1 to 1000"},
		{[]string{"limits", "-queue", "q", "-partition", "p", "-weight", "1001"}, "-weight is 1001; it must be from 1 to 1000"},
		{[]string{"limits", "-queue", "q", "-weight", "many"}, "-weight"},
		{[]string{"limits", "-queue", "q", "-aging", "0s"}, "-aging is 0s; it must be from 1ms to 8760h0m0s, in whole microseconds"},
		{[]string{"limits", "-queue", "q", "-aging", "1.0000005s"}, "-aging is 1.0000005s; it must be from 1ms to 8760h0m0s, in whole microseconds"},
		{[]string{"limits", "-queue", "q", "-aging", "9000h"}, "-aging is 9000h0m0s"},
		{[]string{"limits", "-queue", "q", "-aging", "soon"}, "-aging"},
		{[]string{"limits", "-queue", "", "-weight", "1"}, "-queue is empty; name the queue (default for the default queue)"},
		{[]string{"limits", "-queue", "a\x00b", "-aging", "1m"}, "-queue: lease: queue"},
		{[]string{"limits", "-queue", "q", "-partition", "", "-weight", "1"}, "-partition is empty; name the partition to weigh, or leave -partition out for the queue's default weight"},
		{[]string{"limits", "-queue", "q", "-partition", "a\x00b", "-weight", "1"}, "-partition: lease: partition"},
		{[]string{"limits", "-queue", "q", "-weight", "2", "-aging", "1m"}, "give one of -weight N and -aging D, not both: each call makes one change"},
		{[]string{"limits", "-queue", "q", "-max", "1", "-clear-weight"}, "give one of -max N and -clear-weight, not both: each call makes one change"},
		{[]string{"limits", "-queue", "q", "-weight", "1", "-clear-weight", "-clear-aging"}, "give one of -weight N and -clear-weight and -clear-aging, not more"},
		{[]string{"limits", "-queue", "q", "-weight", "1", "-by", ""}, "-by is empty"},
		{[]string{"limits", "-changes", "-weight", "1"}, "it takes -n, not -weight"},
		{[]string{"limits", "-changes", "-clear-aging"}, "it takes -n, not -clear-aging"},
		{[]string{"limits", "-queue", "q"}, "-weight N makes it fair, -clear-weight ends that; -aging D sets its priority aging, -clear-aging removes it"},
	}
	for _, c := range cases {
		args := c.args
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "help" && !slices.Contains(args, "-dsn") {
			args = append(args[:len(args):len(args)], "-dsn", nowhere)
		}
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			r := must(t, exitUsage, args...)
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("leasework %s: stderr does not say %q:\n%s", strings.Join(args, " "), c.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("leasework %s: a usage error printed on stdout:\n%s", strings.Join(args, " "), r.stdout)
			}
		})
	}
}

// TestEveryCommandIsListed checks that "leasework help" lists every command
// of the dispatcher's table, and help, one line each and nothing else, and
// that the package documentation lists them with the same lines.
func TestEveryCommandIsListed(t *testing.T) {
	t.Parallel()
	names := []string{"help"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	usage := must(t, exitOK, "help").stdout
	_, after, ok := strings.Cut(usage, "\nCommands:\n\n")
	list, _, _ := strings.Cut(after, "\n\n")
	if !ok || list == "" {
		t.Fatalf("leasework help has no command list:\n%s", usage)
	}
	lines := strings.Split(list, "\n")
	if len(lines) != len(names) {
		t.Errorf("leasework help lists %d commands; the dispatcher has %d (%v):\n%s", len(lines), len(names), names, list)
	}
	for _, name := range names {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "\t"+name+" ") }) {
			t.Errorf("leasework help does not list the command %q:\n%s", name, list)
		}
	}

	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if doc := f.Doc.Text(); !strings.Contains(doc, list+"\n") {
		t.Errorf("the package documentation does not list the commands as leasework help does; want these lines in it:\n%s\n\ndocumentation:\n%s", list, doc)
	}
}

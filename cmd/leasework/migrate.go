package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/leasework/leasework/lease"
)

type migrateCmd struct{ print bool }

func (m *migrateCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&m.print, "print", false, "print every migration's SQL for -schema and -table instead of applying it; no database is needed")
}

// offline reports whether the command runs without a database.
func (m *migrateCmd) offline() bool { return m.print }

type scriptJSON struct {
	Version         int    `json:"version"`
	Name            string `json:"name"`
	WhileWorkersRun bool   `json:"while_workers_run"`
	NoTransaction   bool   `json:"no_transaction"`
	SQL             string `json:"sql"`
}

// execOffline prints the migrations' SQL for opts, each with a header that
// says whether workers may run while it is applied.
func (m *migrateCmd) execOffline(opts lease.Options, out *printer) error {
	var scripts []scriptJSON
	for _, mg := range lease.Migrations() {
		q, err := mg.SQL(opts)
		if err != nil {
			return err
		}
		scripts = append(scripts, scriptJSON{Version: mg.Version, Name: mg.Name, WhileWorkersRun: mg.WhileWorkersRun,
			NoTransaction: mg.NoTransaction, SQL: q})
	}
	if out.json {
		return out.JSON(scripts)
	}
	for _, s := range scripts {
		when := "may be applied while workers run"
		if !s.WhileWorkersRun {
			when = "apply with every worker and producer of the previous version stopped"
		}
		how := "run it in a transaction of its own"
		if s.NoTransaction {
			how = "run it OUTSIDE any transaction, one statement at a time"
		}
		if err := out.Linef("-- leasework migration %d (%s): %s; %s\n%s", s.Version, s.Name, when, how, s.SQL); err != nil {
			return err
		}
	}
	return nil
}

func (*migrateCmd) check() error { return nil }

type migrationJSON struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

type migrateJSON struct {
	Schema  string          `json:"schema"`
	Table   string          `json:"table"`
	Applied []migrationJSON `json:"applied"` // empty when the schema was up to date
	Version int             `json:"version"` // the schema's version now
}

func (*migrateCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	applied, err := st.Migrate(ctx)
	var collision *lease.NameCollisionError
	if errors.As(err, &collision) {
		return fmt.Errorf("%w\n(with this command: leasework migrate -schema %s -table <another name>, or -schema <another schema>)", err, st.Schema())
	}
	if err != nil {
		return err
	}
	all := lease.Migrations()
	names := make(map[int]string, len(all))
	for _, m := range all {
		names[m.Version] = m.Name
	}
	res := migrateJSON{Schema: st.Schema(), Table: st.Table(), Applied: []migrationJSON{}}
	if len(all) > 0 {
		res.Version = all[len(all)-1].Version
	}
	for _, v := range applied {
		res.Applied = append(res.Applied, migrationJSON{Version: v, Name: names[v]})
	}
	if out.json {
		return out.JSON(res)
	}
	if len(applied) == 0 {
		return out.Linef("nothing to apply: %s is up to date (version %d)", st.QualifiedTable(), res.Version)
	}
	rows := make([][]string, len(res.Applied))
	for i, m := range res.Applied {
		rows[i] = []string{"applied", itoa(int64(m.Version)), m.Name}
	}
	if err := out.Table(nil, rows); err != nil {
		return err
	}
	return out.Linef("%s is at version %d", st.QualifiedTable(), res.Version)
}

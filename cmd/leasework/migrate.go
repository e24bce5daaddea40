package main

import (
	"context"
	"flag"

	"github.com/leasework/leasework/lease"
)

type migrateCmd struct{}

func (*migrateCmd) flags(*flag.FlagSet) {}

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

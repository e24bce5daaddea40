package main

import (
	"context"
	"flag"
	"runtime"
	"runtime/debug"

	"github.com/leasework/leasework/lease"
)

// versionCmd prints what this binary is; it needs no database.
type versionCmd struct{}

func (*versionCmd) flags(*flag.FlagSet) {}

func (*versionCmd) check() error { return nil }

func (*versionCmd) offline() bool { return true }

type versionJSON struct {
	Version       string `json:"version"`        // the module's, "(devel)" when built from a checkout
	Go            string `json:"go"`             // the Go release it was built with
	SchemaVersion int    `json:"schema_version"` // the last migration it applies
}

func (*versionCmd) execOffline(_ lease.Options, out *printer) error {
	v := versionJSON{Version: "(unknown)", Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	if all := lease.Migrations(); len(all) > 0 {
		v.SchemaVersion = all[len(all)-1].Version
	}
	if out.json {
		return out.JSON(v)
	}
	return out.Linef("leasework %s (%s), schema version %d", v.Version, v.Go, v.SchemaVersion)
}

// exec is execOffline: the command never needs the store.
func (v *versionCmd) exec(_ context.Context, _ *lease.Store, out *printer) error {
	return v.execOffline(lease.Options{}, out)
}

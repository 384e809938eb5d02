package main

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/catalog"
)

// tasksFlags is rein serve's --tasks: the catalog of named tasks, read at
// start and again on SIGHUP.
type tasksFlags struct {
	dir string
}

func (t *tasksFlags) register(f *pflag.FlagSet) {
	f.StringVar(&t.dir, "tasks", "", "a directory of named tasks callers may start with inputs (StartRun's task, rein tasks, the MCP face): each *.json file a task file with a name, description, input_schema and the tenants and roles allowed; SIGHUP reloads it, a bad file keeping the previous catalog")
}

// load reads --tasks into the catalog in force; a directory that is
// refused is a usage error. With a directory it reloads it on each
// SIGHUP, logging what it holds, or why it was refused (the file and
// line) and that the previous catalog stays, until ctx ends or stop is
// called.
func (t *tasksFlags) load(ctx context.Context, log *slog.Logger) (live *catalog.Holder, stop func(), err error) {
	live, err = catalog.NewHolder(t.dir)
	if err != nil {
		return nil, nil, usageError("--tasks: %v", err)
	}
	if t.dir == "" {
		return live, func() {}, nil
	}
	log.Info("task catalog loaded", "dir", t.dir, "tasks", live.Current().Names())
	stop = onHangup(ctx, func() {
		c, err := live.Reload()
		if err != nil {
			log.Error("task catalog not reloaded; keeping the previous catalog", "dir", t.dir, "error", err)
			return
		}
		log.Info("task catalog reloaded", "dir", t.dir, "tasks", c.Names())
	})
	return live, stop, nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/lease"
)

// uiCmd serves the operator console until interrupted.
type uiCmd struct {
	addr    string
	actions bool
	timeout time.Duration // each request's bound, from -timeout
}

func (u *uiCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&u.addr, "addr", "localhost:8080", "listen on this `address` (host:port; port 0 picks a free one)")
	fs.BoolVar(&u.actions, "actions", false, "enable the actions: requeue, discard, cancel, pause and resume (default read-only)")
}

func (u *uiCmd) check() error {
	if _, port, err := net.SplitHostPort(u.addr); err != nil || port == "" {
		return usagef("-addr %q is not host:port (such as localhost:8080 or :8080)", u.addr)
	}
	return nil
}

// setTimeout makes -timeout bound each request's statements: the command
// itself runs until it is interrupted.
func (u *uiCmd) setTimeout(d time.Duration) { u.timeout = d }

// shutdownGrace is how long requests in flight get to finish once the
// command is interrupted.
const shutdownGrace = 5 * time.Second

type uiJSON struct {
	URL     string `json:"url"`
	Actions bool   `json:"actions"`
}

func (u *uiCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	var logger *slog.Logger
	if out.json {
		logger = slog.New(slog.NewJSONHandler(out.w, nil))
	} else {
		logger = slog.New(slog.NewTextHandler(out.w, nil))
	}
	c, err := console.New(st, console.Options{Actions: u.actions, Logger: logger, Timeout: u.timeout})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		return err
	}
	tcp := ln.Addr().(*net.TCPAddr)
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "localhost"
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port)) + "/"
	if out.json {
		err = out.JSON(uiJSON{URL: url, Actions: u.actions})
	} else {
		mode := "read-only; -actions enables the actions"
		if u.actions {
			mode = "actions enabled"
		}
		err = out.Linef("leasework console for %s.%s on %s (%s)", st.Schema(), st.Table(), url, mode)
	}
	if err != nil {
		ln.Close()
		return err
	}
	if u.actions && !tcp.IP.IsLoopback() {
		logger.Warn("actions are enabled and the console asks nobody who they are: whoever reaches this address can requeue, discard, cancel and pause; listen on localhost or behind a proxy that authenticates", "addr", ln.Addr().String())
	}

	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	logger.Info("leasework console stopped")
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/lease"
)

// uiCmd serves the operator console until interrupted.
type uiCmd struct {
	addr       string
	actions    bool
	allowHosts []string      // from -allow-host
	timeout    time.Duration // each request's bound, from -timeout
}

func (u *uiCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&u.addr, "addr", "localhost:8080", "listen on this `address` (host:port; port 0 picks a free one)")
	fs.BoolVar(&u.actions, "actions", false, "enable the actions: requeue, discard, cancel, pause and resume, set and clear limits (default read-only)")
	fs.Func("allow-host", "also answer to this `name` in the Host header: name (any port) or name:port; repeat or separate with commas (default: only the names of -addr)", func(s string) error {
		for h := range strings.SplitSeq(s, ",") {
			u.allowHosts = append(u.allowHosts, strings.TrimSpace(h))
		}
		return nil
	})
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
	URL     string   `json:"url"`
	Actions bool     `json:"actions"`
	Hosts   []string `json:"hosts"` // the Host header values it answers to
}

// listenNames returns the names a browser may put in the Host header to
// reach a listener on ln, bound as addr (-addr) asked: the name addr
// gives, ln's address, and localhost for a loopback address; for an
// unspecified address, localhost and each of ifaces (the machine's
// interface addresses). Each has ln's port. Any other name is one a page of
// another site may have bound to this address (DNS rebinding).
func listenNames(addr string, ln *net.TCPAddr, ifaces []netip.Addr) []string {
	port := strconv.Itoa(ln.Port)
	var names []string
	add := func(host string) {
		if n := net.JoinHostPort(host, port); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	host, _, _ := net.SplitHostPort(addr)
	if _, err := netip.ParseAddr(host); err != nil && host != "" {
		add(strings.TrimSuffix(strings.ToLower(host), "."))
	}
	ip, _ := netip.AddrFromSlice(ln.IP)
	ip = ip.Unmap()
	switch {
	case ip.IsUnspecified():
		add("localhost")
		for _, a := range ifaces {
			add(a.Unmap().WithZone("").String())
		}
	case ip.IsLoopback():
		add(ip.String())
		add("localhost")
	default:
		add(ip.String())
	}
	return names
}

// interfaceAddrs returns the addresses of the machine's network
// interfaces; none if they cannot be read.
func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip)
			}
		}
	}
	return out
}

func (u *uiCmd) exec(ctx context.Context, st *lease.Store, out *printer) error {
	var logger *slog.Logger
	if out.json {
		logger = slog.New(slog.NewJSONHandler(out.w, nil))
	} else {
		logger = slog.New(slog.NewTextHandler(out.w, nil))
	}
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		return err
	}
	tcp := ln.Addr().(*net.TCPAddr)
	var ifaces []netip.Addr
	if tcp.IP.IsUnspecified() {
		ifaces = interfaceAddrs()
	}
	hosts := append(listenNames(u.addr, tcp, ifaces), u.allowHosts...)
	c, err := console.New(st, console.Options{Actions: u.actions, Logger: logger, Timeout: u.timeout, AllowedHosts: hosts})
	if err != nil {
		ln.Close()
		// The names of the listener are well formed: the flag's are not.
		for _, h := range u.allowHosts {
			if _, err := console.New(st, console.Options{AllowedHosts: []string{h}}); err != nil {
				return usagef("-allow-host %q is not a host name or IP address with an optional port (such as ops.example.com, ops.example.com:8443 or [::1]:8080)", h)
			}
		}
		return err
	}
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "localhost"
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port)) + "/"
	if out.json {
		err = out.JSON(uiJSON{URL: url, Actions: u.actions, Hosts: hosts})
	} else {
		mode := "read-only; -actions enables the actions"
		if u.actions {
			mode = "actions enabled"
		}
		err = out.Linef("leasework console for %s.%s on %s (%s)", st.Schema(), st.Table(), url, mode)
		if err == nil {
			err = out.Linef("answering to Host %s only; -allow-host adds names", strings.Join(hosts, ", "))
		}
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

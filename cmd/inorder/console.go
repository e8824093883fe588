package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/inorder-dev/inorder/console"
	"github.com/inorder-dev/inorder/internal/xmin"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/processor"
)

// consoleCmd serves the web console until a signal.
func consoleCmd(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("console", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database")
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve on; other than loopback only with a token in INORDER_CONSOLE_TOKEN")
	allow := fs.Bool("allow-actions", false, "offer the operator actions (pause, resume, retry, skip, rewind, redrive); read-only without it")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	holdAfter := fs.Duration("xmin-hold-after", xmin.DefaultHoldAfter, "name on the pages what has held the database's xmin horizon "+
		"(vacuum's) longer than this")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	sigs := stopOnSignals(ctx, log)
	defer sigs.Stop()
	runCtx := ctx // the group's: a signal reaches the group through its signal actor alone
	ctx = sigs.Context()
	if *holdAfter <= 0 {
		return usageErr("--xmin-hold-after must be positive, got %s", *holdAfter)
	}
	cfg := console.Config{Token: os.Getenv("INORDER_CONSOLE_TOKEN"), AllowActions: *allow, XminHoldAfter: *holdAfter}
	if err := checkAddr(*addr, cfg.Token); err != nil {
		return usageErr("--addr: %v", err)
	}
	cc, before, err := dbURL.connConfig()
	if err != nil {
		return err
	}
	// A Client that runs no processor owns the console's connections: a pool of two, made as every
	// connection of inorder is (the credentials read at each, the deadlines).
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, BeforeConnectFunc: before, MaxConns: 3})
	if err != nil {
		return err
	}
	defer client.Close()
	cfg.Pool = client.Pool()
	con, err := console.New(cfg)
	if err != nil {
		return err
	}
	g := lifecycle.New(lifecycle.Config{Logger: log, Stopping: "closing the console"})
	g.AddSignals(sigs)
	g.Add("lag samples", con.Run) // the charts' hour, measured whether or not a page is open
	a, err := g.AddHTTPServer("console", *addr, con, 5*time.Second)
	if err != nil {
		return usageErr("--addr: %v", err)
	}
	log.Info().Str("addr", a.String()).Bool("actions", *allow).Bool("token", cfg.Token != "").Msg("serving the console")
	return g.Run(runCtx) // a signal stops it with a *lifecycle.SignalError: realMain exits 0
}

// checkAddr refuses to serve a console without a token on addr unless addr is a loopback address
// (127.0.0.1, ::1, localhost): anyone who can reach it could read every stream's errors and, with
// actions allowed, skip records. An empty host (":8080") listens on every interface, so it needs a token
// too. The console itself also answers only loopback clients when it has no token.
func checkAddr(addr, token string) error {
	if token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("console: an address other than loopback needs a token: %q listens beyond this machine; "+
		"set a token (INORDER_CONSOLE_TOKEN) or listen on 127.0.0.1", addr)
}

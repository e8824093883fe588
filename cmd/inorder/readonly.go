package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/internal/dial"
)

// standbyAdvice is what to do when the database URL names a standby.
const standbyAdvice = "which takes no writes: point --database-url (DATABASE_URL) at the primary"

// refuseStandby fails when conn's server is a standby (in recovery): migrate writes, and would otherwise
// fail on its first statement with only "cannot execute ... in a read-only transaction".
func refuseStandby(ctx context.Context, conn *pgx.Conn) error {
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("ask whether the server is a standby: %w", err)
	}
	if inRecovery {
		return fmt.Errorf("the server at %s is a standby (in recovery), %s", serverOf(conn.Config()), standbyAdvice)
	}
	return nil
}

// explainReadOnly says why the server refused a write as read-only (SQLSTATE 25006), asking the servers of
// databases which of them is a standby: a URL copied from a replica's host, or the session's
// default_transaction_read_only set on the database or the role. Any other error is returned as it is.
func explainReadOnly(ctx context.Context, err error, databases ...database) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		return err
	}
	for _, db := range databases {
		if standby(ctx, db) {
			return fmt.Errorf("%w: the server at %s is a standby (in recovery), %s", err, serverOf(db.cc), standbyAdvice)
		}
	}
	return fmt.Errorf("%w: the session is read-only: default_transaction_read_only is on for the database or "+
		"the role (ALTER DATABASE|ROLE ... RESET default_transaction_read_only)", err)
}

// database is a database a command works on: its configuration, and what each connection to it is given
// first (see credentials).
type database struct {
	cc     *pgx.ConnConfig
	before dial.BeforeConnectFunc
}

// standby reports whether the server of db is in recovery, false when that cannot be known.
func standby(ctx context.Context, db database) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dial.DefaultTimeout)
	defer cancel()
	c := db.cc.Copy()
	dial.Configure(c, 0)
	conn, err := dial.Connect(ctx, c, db.before)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var inRecovery bool
	return conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery) == nil && inRecovery
}

// serverOf is the address of cc's server as an operator writes it: host:port, or a Unix socket's directory.
func serverOf(cc *pgx.ConnConfig) string {
	if strings.HasPrefix(cc.Host, "/") {
		return cc.Host
	}
	return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
}

// Package pooler knows what a connection pooler between inorder and Postgres (PgBouncer, or the pooler of
// a hosted Postgres) changes: whether a connection goes through one, whether it pools by transaction, and
// what a pooler's refusals mean, in one line that says what to do.
//
// # What survives a pooler
//
// A pooler in session mode gives a client one server connection for as long as the client stays; in
// transaction mode, only for the length of a transaction, and between transactions the server connection
// serves other clients. What a transaction does holds through either: its row locks, its SET LOCAL
// settings, its transaction-level advisory locks, and the rows it writes. What a session keeps (a session
// advisory lock, a plain SET, LISTEN, a prepared statement in PgBouncer before 1.21) may be taken by another
// client or lost. inorder keeps what must hold in transactions and rows; this package tells the rest.
//
// # Start-up parameters
//
// PgBouncer refuses, in every mode, a start-up parameter it does not know (it knows application_name,
// client_encoding, DateStyle, TimeZone and standard_conforming_strings, plus what its
// ignore_startup_parameters lists). inorder sends only application_name; a refusal of another one comes
// from the URL, and Explain says which and what to do.
package pooler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrPreparedStatements wraps the error of a statement that failed because the pooler does not keep
// prepared statements between transactions. Retrying cannot help; the URL must change.
var ErrPreparedStatements = errors.New("the pooler does not keep prepared statements between transactions " +
	"(PgBouncer in transaction mode before 1.21): add default_query_exec_mode=exec to the database URL " +
	"(or simple_protocol), or raise PgBouncer's max_prepared_statements (1.21 and later)")

// ErrStartupParameter wraps a pooler's refusal of a start-up parameter. Retrying cannot help.
var ErrStartupParameter = errors.New("the pooler refused a start-up parameter")

// Explain returns err wrapped with what to do when a pooler is its cause: a prepared statement that the
// pooler lost or gave to another client (ErrPreparedStatements), or a start-up parameter it refused
// (ErrStartupParameter). Any other error is returned as it is.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case (pgErr.Code == "42P05" || pgErr.Code == "26000") && strings.Contains(pgErr.Message, "stmtcache_"):
		// pgx names its cached statements stmtcache_<hash>: one of them was prepared on a server connection
		// that the pooler has since given to another client, or is missing on the one it gives now.
		if errors.Is(err, ErrPreparedStatements) {
			return err
		}
		return fmt.Errorf("%w (%v)", ErrPreparedStatements, err)
	case pgErr.Code == "08P01" && strings.HasPrefix(pgErr.Message, "unsupported startup parameter"):
		if errors.Is(err, ErrStartupParameter) {
			return err
		}
		param := strings.TrimSpace(strings.TrimPrefix(pgErr.Message, "unsupported startup parameter:"))
		return fmt.Errorf("%w: %s; inorder sends none but application_name, so it comes from the URL (or "+
			"PGOPTIONS): remove it there, or list it in PgBouncer's ignore_startup_parameters: %w",
			ErrStartupParameter, param, err)
	}
	return err
}

// Fatal reports whether err is a pooler's refusal that retrying cannot fix (see Explain).
func Fatal(err error) bool {
	err = Explain(err)
	return errors.Is(err, ErrPreparedStatements) || errors.Is(err, ErrStartupParameter)
}

// Pooled reports whether conn goes through a pooler: the backend process id Postgres sent at connect (which
// a pooler makes up, since it answers cancel requests itself) is not the one serving the connection. It
// returns the one serving it too. A pooler that passes the server's own id through cannot be told from a
// direct connection here; in transaction mode the serving backend changes between transactions later.
func Pooled(ctx context.Context, conn *pgx.Conn) (pooled bool, backend uint32, err error) {
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return false, 0, err
	}
	return backend != conn.PgConn().PID(), backend, nil
}

// PoolsTransactions reports whether the pooler that its connections go through (see Pooled) pools by
// transaction, where it can tell. It is given a client connection of the pooler, and a way to open a second
// one, and closes both: the first asks which backend serves it, the second holds a transaction, and the
// first asks again. In session
// mode the first keeps its backend, which the second never gets (with every server connection taken, the
// second waits: a session pooler). In transaction mode the second gets the first's idle backend (PgBouncer
// reuses the one used last) or the first gets another one, or waits for one while the second holds the
// last. A false answer means session pooling or a pooler that could not be told apart from it.
//
// The connections come from their owner (a processor.Client), so that they are made as its others are: its
// credentials, its deadlines.
func PoolsTransactions(ctx context.Context, first *pgx.Conn, connect func(context.Context) (*pgx.Conn, error)) (bool, error) {
	const wait = 2 * time.Second
	pid := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (uint32, bool, error) {
		qctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		var pid uint32
		err := q.QueryRow(qctx, "SELECT pg_backend_pid()").Scan(&pid)
		if err != nil && qctx.Err() != nil && ctx.Err() == nil {
			return 0, false, nil // waited for a server connection
		}
		return pid, err == nil, err
	}
	defer first.Close(context.WithoutCancel(ctx))
	before, ok, err := pid(first)
	if err != nil || !ok {
		return false, err
	}
	second, err := connect(ctx)
	if err != nil {
		return false, err
	}
	defer second.Close(context.WithoutCancel(ctx))
	bctx, cancel := context.WithTimeout(ctx, wait)
	tx, err := second.Begin(bctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return false, nil // the first keeps the only server connection: session pooling
		}
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	held, ok, err := pid(tx)
	if err != nil || !ok {
		return false, err
	}
	after, ok, err := pid(first)
	if err != nil {
		return false, err
	}
	if !ok {
		return true, nil // the first lost its server connection to the second's transaction
	}
	return held == before || after != before, nil
}

package dial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BeforeConnectFunc is called before each connection with a copy of its configuration, which it may
// change for that connection alone: the password read again (a rotated Secret, a token that expires), the
// TLS configuration. An error it returns fails the connection (see BeforeConnectError).
type BeforeConnectFunc = func(ctx context.Context, cc *pgx.ConnConfig) error

// Connect opens one connection with cc, given first, as a copy, to before when it is set. Every
// connection inorder opens goes through it (or through a pool whose BeforeConnect is before), so that a
// password or a token is read at each connection, never once for the life of the process.
func Connect(ctx context.Context, cc *pgx.ConnConfig, before BeforeConnectFunc) (*pgx.Conn, error) {
	if before != nil {
		cc = cc.Copy()
		if err := before(ctx, cc); err != nil {
			return nil, &BeforeConnectError{User: cc.User, Server: serverOf(cc.Host, cc.Port), Err: err}
		}
	}
	return pgx.ConnectConfig(ctx, cc)
}

// BeforeConnectError is the error of a BeforeConnectFunc: the credentials of a connection could not be
// had (a password file unreadable, a token not issued).
type BeforeConnectError struct {
	// User and Server are those of the connection that was to be made.
	User, Server string
	Err          error
}

func (e *BeforeConnectError) Error() string {
	return fmt.Sprintf("credentials for user %s on %s: %v", e.User, e.Server, e.Err)
}

func (e *BeforeConnectError) Unwrap() error { return e.Err }

// CredentialsRefused reports whether err is a connection the server refused for its credentials (SQLSTATE
// 28P01, a wrong password; 28000, a role or a pg_hba.conf entry that does not let it in), or whose
// credentials could not be had (BeforeConnectError). With it comes the line that says so, naming the user
// and the server: "the database refused the credentials of user app on db:5432". Once a process has
// connected, such an error is an outage that it waits out (the credentials were rotated under it), not
// an exit; at start-up it is a mistake, reported at once.
func CredentialsRefused(err error) (line string, ok bool) {
	if err == nil {
		return "", false
	}
	var be *BeforeConnectError
	if errors.As(err, &be) {
		return fmt.Sprintf("the credentials of user %s on %s could not be had: %v", be.User, be.Server, be.Err), true
	}
	var ce *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if !errors.As(err, &ce) || !errors.As(err, &pgErr) || (pgErr.Code != "28P01" && pgErr.Code != "28000") {
		return "", false
	}
	return fmt.Sprintf("the database refused the credentials of user %s on %s (%s)",
		ce.Config.User, serverOf(ce.Config.Host, ce.Config.Port), pgErr.Message), true
}

// serverOf is a server's address as an operator writes it: host:port, or a Unix socket's directory.
func serverOf(host string, port uint16) string {
	if strings.HasPrefix(host, "/") { // a Unix socket's directory has no port of its own to show
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// ForPool returns before as a pgxpool.Config.BeforeConnect, its errors a BeforeConnectError as Connect's
// are; nil for nil.
func ForPool(before BeforeConnectFunc) BeforeConnectFunc {
	if before == nil {
		return nil
	}
	return func(ctx context.Context, cc *pgx.ConnConfig) error {
		if err := before(ctx, cc); err != nil {
			return &BeforeConnectError{User: cc.User, Server: serverOf(cc.Host, cc.Port), Err: err}
		}
		return nil
	}
}

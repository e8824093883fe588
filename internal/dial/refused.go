package dial

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Explain returns err with the text of a connection the server refused (a wrong password, an unknown
// role or database) rewritten as one line: the user, the database and the server (host and port), and the
// server's own words, without the attempts before the last that pgx also reports (sslmode=prefer, the
// default, tries TLS first, and a server without TLS refuses that with "tls error: server refused TLS
// connection", which is not why the connection failed). The result wraps err; any other error is returned
// as it is.
func Explain(err error) error {
	var ce *pgconn.ConnectError
	var refused *pgconn.PgError
	if err == nil || !errors.As(err, &ce) || !errors.As(err, &refused) {
		return err
	}
	server := serverOf(ce.Config.Host, ce.Config.Port)
	line := fmt.Sprintf("failed to connect to `user=%s database=%s` on %s: %v", ce.Config.User, ce.Config.Database, server, refused)
	return &explained{msg: strings.Replace(err.Error(), ce.Error(), line, 1), err: err}
}

type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

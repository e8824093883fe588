package dial

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Explain returns err with the text of a connection the server refused (a wrong password, an unknown
// role or database) rewritten as one line: the user, the database and the server (host and port), and the
// server's own words, without the attempts before the last that pgx also reports (sslmode=prefer, the
// default, tries TLS first, and a server without TLS refuses that with "tls error: server refused TLS
// connection", which is not why the connection failed). A server whose certificate does not name the host
// connected to (sslmode=verify-full) is said the same way, naming both. The result wraps err; any other
// error is returned as it is.
func Explain(err error) error {
	var ce *pgconn.ConnectError
	var refused *pgconn.PgError
	var mismatch x509.HostnameError
	if err != nil && errors.As(err, &ce) && errors.As(err, &mismatch) && mismatch.Certificate != nil {
		server := serverOf(ce.Config.Host, ce.Config.Port)
		line := fmt.Sprintf("failed to connect to `user=%s database=%s` on %s: the server's certificate is for %s, "+
			"not %s, the host the URL names (sslmode=verify-full checks it): connect by a name the certificate "+
			"holds, or have one issued for this name", ce.Config.User, ce.Config.Database, server,
			certNames(mismatch.Certificate), mismatch.Host)
		return &explained{msg: strings.Replace(err.Error(), ce.Error(), line, 1), err: err}
	}
	if err == nil || !errors.As(err, &ce) || !errors.As(err, &refused) {
		return err
	}
	server := serverOf(ce.Config.Host, ce.Config.Port)
	line := fmt.Sprintf("failed to connect to `user=%s database=%s` on %s: %v", ce.Config.User, ce.Config.Database, server, refused)
	return &explained{msg: strings.Replace(err.Error(), ce.Error(), line, 1), err: err}
}

// certNames are the names a certificate is for: its DNS names and IP addresses, else its common name.
func certNames(c *x509.Certificate) string {
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		names = append(names, c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}

type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

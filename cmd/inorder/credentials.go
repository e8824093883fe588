package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/dial"
)

// databaseURL is the --database-url flag (its value, or $DATABASE_URL when the flag is not given) and
// --database-password-file beside it.
type databaseURL struct {
	flagWithDefault
	passwordFile string
}

// registerDatabaseURL adds --database-url and --database-password-file to fs, with what they are for.
func registerDatabaseURL(fs *flag.FlagSet, d *databaseURL, what string) {
	d.def = func() string { return os.Getenv("DATABASE_URL") }
	fs.Var(&d.flagWithDefault, "database-url", "`url` of the "+what+" (default $DATABASE_URL)")
	fs.StringVar(&d.passwordFile, "database-password-file", "", "`file` holding the database password, read again "+
		"for every new connection (a mounted Secret that a rotation rewrites in place); it wins over a password in the URL")
}

// connConfig parses the database URL (naming the flag in the error, never echoing a password) and returns
// with it what gives each connection its credentials, read again for every connection (see credentials).
func (d *databaseURL) connConfig() (*pgx.ConnConfig, dial.BeforeConnectFunc, error) {
	url := d.get()
	cc, err := connConfig(url)
	if err != nil {
		return nil, nil, err
	}
	if d.passwordFile != "" {
		if _, err := readPasswordFile(d.passwordFile); err != nil {
			return nil, nil, usageErr("--database-password-file: %v", err)
		}
	}
	return cc, credentials(url, d.passwordFile), nil
}

// credentials returns what each connection of the database named by url is given first: the password
// read again, from passwordFile when it is set, else from where libpq reads it (the URL, PGPASSWORD, or
// the passfile: PGPASSFILE, ~/.pgpass), and the TLS files the URL names (sslrootcert, sslcert, sslkey)
// read again too. pgx reads these once, when the URL is parsed; libpq, at every connection, which is what
// lets a credential be rotated under a running process: the file rewritten, the role's password changed,
// and the connections made afterwards use the new one.
func credentials(url, passwordFile string) dial.BeforeConnectFunc {
	return func(_ context.Context, cc *pgx.ConnConfig) error {
		fresh, err := pgx.ParseConfig(url)
		if err != nil {
			return fmt.Errorf("read the database URL again: %s", redactParseError(err))
		}
		cc.Password, cc.TLSConfig, cc.Fallbacks = fresh.Password, fresh.TLSConfig, fresh.Fallbacks
		if passwordFile != "" {
			if cc.Password, err = readPasswordFile(passwordFile); err != nil {
				return err
			}
		}
		return nil
	}
}

// readPasswordFile returns the password the file holds: its content without the line break that ends it.
func readPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the password file: %w", err)
	}
	password := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if password == "" {
		return "", errors.New("the password file " + path + " is empty")
	}
	return password, nil
}

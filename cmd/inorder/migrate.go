package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/inorder-dev/inorder/migrations"
)

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "database to migrate (default $DATABASE_URL)")
	print := fs.Bool("print", false, "print the SQL instead of applying it, for teams that use their own migration tool")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *print {
		_, err := io.WriteString(stdout, migrations.Script())
		return err
	}
	conn, err := connect(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	res, err := migrations.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	if len(res.Versions) == 0 {
		fmt.Fprintf(stderr, "inorder migrate: schema is current (version %d)\n", res.Current)
	} else {
		fmt.Fprintf(stderr, "inorder migrate: applied %v; schema is at version %d\n", res.Versions, res.Current)
	}
	return nil
}

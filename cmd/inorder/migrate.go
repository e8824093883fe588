package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/migrations"
)

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	var dbURL databaseURL
	registerDatabaseURL(fs, &dbURL, "database to migrate")
	print := fs.Bool("print", false, "print the SQL instead of applying it, for teams that use their own migration tool")
	var clocks, notify, partitionIndexes tableList
	fs.Var(&clocks, "table", "also give this source table inorder's insert clock, online: a column the database stamps at every insert, "+
		"by which run orders the table whoever writes created_at (repeatable)")
	fs.Var(&notify, "notify", "also create the insert-notification trigger on this source table, for run --listen (repeatable)")
	fs.Var(&partitionIndexes, "partition-index", "also create the index for run --partitions N on TABLE:KEY_COLUMN:N (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	type partitionIndex struct {
		table, key string
		n          int
	}
	var pidx []partitionIndex
	for _, spec := range partitionIndexes {
		parts := strings.Split(spec, ":")
		n, err := strconv.Atoi(parts[len(parts)-1])
		if len(parts) != 3 || err != nil || n < 1 || parts[0] == "" || parts[1] == "" {
			return usageErr("--partition-index %q: want TABLE:KEY_COLUMN:N, e.g. bookings:aggregate_id:4", spec)
		}
		pidx = append(pidx, partitionIndex{parts[0], parts[1], n})
	}
	// A partitioned read of a table with the insert clock is ordered by it, and so is its index.
	indexSQL := func(p partitionIndex, clocked bool) string {
		at := "created_at"
		if clocked {
			at = source.ClockAtExpr("created_at")
		}
		return source.PartitionIndexSQL(p.table, p.key, at, "id", p.n)
	}
	if *print {
		script := migrations.Script()
		for _, t := range clocks {
			script += migrations.ClockSQL(t, migrations.ClockOpts{})
		}
		var indexes []string
		for _, p := range pidx {
			indexes = append(indexes, indexSQL(p, slices.Contains(clocks, p.table)))
		}
		for _, idx := range indexes {
			script += "-- serves run --partitions; outside a transaction\n" + idx + ";\n"
		}
		for _, t := range notify {
			script += "-- wake processors running with --listen on inserts into " + t + "\n" + migrations.NotifySQL(t) + "\n"
		}
		_, err := io.WriteString(stdout, script)
		return err
	}
	// Migrate tries again and again while a lock it needs is held (a pg_dump holds one on every table it
	// dumps): SIGINT or SIGTERM ends that, with a line naming the lock.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, err := connectAny(ctx, &dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := refuseStandby(ctx, conn); err != nil {
		return err
	}
	res, err := migrations.MigrateWith(ctx, conn, migrations.Options{Waited: func(w migrations.LockWait) {
		fmt.Fprintf(stderr, "inorder migrate: %s; trying again in %s\n", w, w.RetryIn)
	}})
	if err != nil {
		return explainReadOnly(ctx, err, database{cc: conn.Config()})
	}
	for _, t := range clocks {
		err := migrations.AddClock(ctx, conn, t, migrations.ClockOpts{WaitedFunc: func(w migrations.LockWait) {
			fmt.Fprintf(stderr, "inorder migrate: %s; trying again in %s\n", w, w.RetryIn)
		}})
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "inorder migrate: insert clock on %s in place\n", t)
	}
	for _, p := range pidx {
		var clocked bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)
			AND attname = $2 AND NOT attisdropped)`, p.table, migrations.ClockColumn).Scan(&clocked); err != nil {
			return fmt.Errorf("partition index: %w", err)
		}
		idx := indexSQL(p, clocked)
		if _, err := conn.Exec(ctx, idx); err != nil {
			return fmt.Errorf("partition index: %w", err)
		}
		fmt.Fprintf(stderr, "inorder migrate: %s\n", idx)
	}
	for _, t := range notify {
		if err := migrations.CreateNotifyTrigger(ctx, conn, t); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "inorder migrate: insert-notification trigger on %s in place\n", t)
	}
	if len(res.Versions) == 0 {
		fmt.Fprintf(stderr, "inorder migrate: schema is current (version %d)\n", res.Current)
	} else {
		fmt.Fprintf(stderr, "inorder migrate: applied %v; schema is at version %d\n", res.Versions, res.Current)
	}
	return nil
}

// tableList collects a repeatable flag.
type tableList []string

func (l *tableList) String() string     { return strings.Join(*l, ",") }
func (l *tableList) Set(v string) error { *l = append(*l, v); return nil }

package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The coordinating sessions of a partitioned process: every running instance of one (processor.Partitioned)
// keeps one connection for choosing its partitions, opened before it registers the process and kept until
// it stops, on a direct or session-pooled connection. Its application_name,
// "inorder-partitions:<process>@<instance>", tells the other instances, and Forget, that the instance runs;
// pg_stat_activity shows it to every role.

// coordinatorPrefix begins the application_name of every coordinating session.
const coordinatorPrefix = "inorder-partitions:"

// coordinatorCountPrefix is how much of the application_name CountCoordinators matches: the server keeps 63
// bytes of it, so the match leaves room to tell instances apart.
const coordinatorCountPrefix = 40

// CoordinatorApplicationName is the application_name of the session that instance of partitioned process
// coordinates its partitions on.
func CoordinatorApplicationName(process, instance string) string {
	return coordinatorPrefix + process + "@" + instance
}

// CountCoordinators counts the instances of partitioned process connected to the database, this one's
// session included: the distinct application_names of the sessions that begin as
// CoordinatorApplicationName's for process (its first 40 bytes).
func CountCoordinators(ctx context.Context, q Querier, process string) (int, error) {
	prefix := coordinatorPrefix + process + "@"
	if len(prefix) > coordinatorCountPrefix {
		prefix = prefix[:coordinatorCountPrefix]
	}
	var n int
	err := q.QueryRow(ctx, `SELECT count(DISTINCT application_name) FROM pg_stat_activity
		WHERE starts_with(application_name, $1) AND datname = current_database()`, prefix).Scan(&n)
	return n, err
}

// ConnectedCoordinator returns the application_name of a session of this database, other than q's own,
// that coordinates an instance of partitioned process, and false when none does. It reads
// pg_stat_activity afresh (pg_stat_clear_snapshot first), so that in a transaction it sees the sessions of
// now, not those of its first look.
func ConnectedCoordinator(ctx context.Context, q Querier, process string) (string, bool, error) {
	if _, err := q.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return "", false, err
	}
	rows, err := q.Query(ctx, `SELECT application_name FROM pg_stat_activity
		WHERE application_name LIKE '`+coordinatorPrefix+`%' AND datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return "", false, err
	}
	apps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", false, err
	}
	for _, a := range apps {
		if coordinatorOf(a, process) {
			return a, true, nil
		}
	}
	return "", false, nil
}

// coordinatorOf reports whether app is the application_name of a coordinating session of partitioned
// process, whole or cut at the server's 63 bytes.
func coordinatorOf(app, process string) bool {
	want := coordinatorPrefix + process + "@"
	return strings.HasPrefix(app, want) || (len(app) >= 63 && strings.HasPrefix(want, app))
}

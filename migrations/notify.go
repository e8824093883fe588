package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// NotifyChannel is the channel the insert trigger notifies; the payload is the table's schema-qualified
// name.
const NotifyChannel = "inorder"

// NotifyTriggerName is the name of the insert-notification trigger on a source table.
const NotifyTriggerName = "inorder_notify"

// NotifySQL returns the statement that creates (or replaces) the insert-notification trigger on table,
// without asking the database: the name is split on dots into schema and table and quoted as it stands.
// It is what CreateNotifyTrigger runs, printed for teams that apply schema changes with their own tool
// (inorder migrate --print).
func NotifySQL(table string) string {
	return notifySQL(pgx.Identifier(strings.Split(table, ".")).Sanitize())
}

func notifySQL(ident string) string {
	return fmt.Sprintf("CREATE OR REPLACE TRIGGER %s AFTER INSERT ON %s FOR EACH STATEMENT "+
		"EXECUTE FUNCTION inorder.notify_insert();", pgx.Identifier{NotifyTriggerName}.Sanitize(), ident)
}

// CreateNotifyTrigger creates (or replaces) the insert-notification trigger on table, a name as in SQL
// (optionally schema-qualified and quoted), so that processors listening for it wake as soon as rows are
// inserted instead of at their next poll. Polling stays the fallback: a notification only ever makes a
// processor look sooner.
func CreateNotifyTrigger(ctx context.Context, conn *pgx.Conn, table string) error {
	var schema, name string
	err := conn.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, table).Scan(&schema, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("notify trigger: table %q does not exist", table)
	}
	if err != nil {
		return fmt.Errorf("notify trigger: table %q: %w", table, err)
	}
	stmt := notifySQL(pgx.Identifier{schema, name}.Sanitize())
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("notify trigger on %q: %w", table, err)
	}
	return nil
}

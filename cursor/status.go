package cursor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Info is what the database says about one process, read without disturbing it.
type Info struct {
	Process string
	State
	// SourceTable, SourceIDColumn and SourceCreatedAtColumn are what the process last ran against; empty
	// until it first locked its cursor.
	SourceTable, SourceIDColumn, SourceCreatedAtColumn string
	// Locked reports whether an instance holds the cursor row now.
	Locked bool
	// Holder is the application_name of the instance holding it ("inorder:<process>@<instance>") and
	// HolderPID its backend, when they can be told.
	Holder    string
	HolderPID int
	// Connected counts the instances with a cursor connection open for this process (the holder and the
	// ones standing by).
	Connected int
	// HeldByPID and HeldSince name the writer backend holding the horizon back, when there is one.
	HeldByPID int
	HeldSince time.Time
	UpdatedAt time.Time
}

// List reads every process's cursor row, or only the named one when name is not empty. It probes each
// row lock with FOR KEY SHARE SKIP LOCKED, which conflicts only with the processor's FOR UPDATE and is
// released at once.
func List(ctx context.Context, conn *pgx.Conn, name string) ([]Info, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read cursors: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	rows, err := tx.Query(ctx, `
		SELECT process_name, position_created_at, position_id, halted_record_id, halted_error, halted_attempts,
		       halted_first_failure_at, halted_last_failure_at,
		       coalesce(source_table, ''), coalesce(source_id_column, ''), coalesce(source_created_at_column, ''),
		       held_by_pid, held_since, updated_at
		FROM inorder.cursor
		WHERE $1 = '' OR process_name = $1
		ORDER BY process_name`, name)
	if err != nil {
		return nil, fmt.Errorf("read cursors: %w", err)
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Info, error) {
		var (
			in                       Info
			posAt, first, last, hsin pgtype.Timestamptz
			posID, haltID, haltErr   pgtype.Text
			attempts                 int32
			heldPID                  pgtype.Int4
		)
		err := r.Scan(&in.Process, &posAt, &posID, &haltID, &haltErr, &attempts, &first, &last,
			&in.SourceTable, &in.SourceIDColumn, &in.SourceCreatedAtColumn, &heldPID, &hsin, &in.UpdatedAt)
		if posAt.Valid {
			in.Position = Position{CreatedAt: posAt.Time.UTC(), ID: posID.String}
		}
		if haltID.Valid {
			in.Halt = &Halt{RecordID: haltID.String, Error: haltErr.String, Attempts: int(attempts),
				FirstFailureAt: first.Time, LastFailureAt: last.Time}
		}
		if heldPID.Valid {
			in.HeldByPID, in.HeldSince = int(heldPID.Int32), hsin.Time
		}
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("read cursors: %w", err)
	}
	for i := range infos {
		in := &infos[i]
		var free bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inorder.cursor WHERE process_name = $1
			FOR KEY SHARE SKIP LOCKED)`, in.Process).Scan(&free); err != nil {
			return nil, fmt.Errorf("probe cursor %q: %w", in.Process, err)
		}
		in.Locked = !free
		// The holder is the instance connection of this process whose transaction has an xid: taking the
		// row lock assigned one, while instances standing by have none.
		rows, err := tx.Query(ctx, `
			SELECT a.application_name, a.pid,
			       EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'transactionid')
			FROM pg_stat_activity a
			WHERE a.application_name LIKE 'inorder:%' AND a.pid <> pg_backend_pid()`)
		if err != nil {
			return nil, fmt.Errorf("find holder of cursor %q: %w", in.Process, err)
		}
		for rows.Next() {
			var app string
			var pid int32
			var hasXid bool
			if err := rows.Scan(&app, &pid, &hasXid); err != nil {
				rows.Close()
				return nil, fmt.Errorf("find holder of cursor %q: %w", in.Process, err)
			}
			// application_name is cut at 63 bytes; compare on what survives.
			want := "inorder:" + in.Process + "@"
			if !strings.HasPrefix(app, want) && !(len(app) >= 63 && strings.HasPrefix(want, app)) {
				continue
			}
			in.Connected++
			if in.Locked && hasXid {
				in.Holder, in.HolderPID = app, int(pid)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("find holder of cursor %q: %w", in.Process, err)
		}
	}
	return infos, nil
}

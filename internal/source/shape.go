package source

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/inordertype"
)

// A table's shape is its columns as the catalog describes them: names, types and dropped columns. An
// application migrates its outbox while a processor runs (ADD COLUMN, DROP COLUMN, RENAME, a change of
// type), and the read the processor built at start no longer fits it. The shape's fingerprint is read with
// the poll of the transactions in flight, which every batch runs anyway (see horizonSQL), so that a
// change is noticed at the next batch for the price of an index lookup in pg_attribute; the columns are
// inspected again only then.

// shapeExpr is the fingerprint of table $1's columns: every attribute's name, type, type modifier and
// whether it was dropped, in attnum order. Any ALTER TABLE that changes what a read selects or what it
// gets back changes it; VACUUM FULL, CLUSTER and pg_repack, which rewrite the rows, do not.
const shapeExpr = `(SELECT md5(string_agg(a.attname || ':' || a.atttypid || ':' || a.atttypmod || ':' || a.attisdropped,
		',' ORDER BY a.attnum)) FROM pg_attribute AS a WHERE a.attrelid = $1::oid AND a.attnum > 0)`

// Shape reads the fingerprint of t's columns now, as the poll of the transactions in flight reads it
// (Observation.Shape).
func (t *Table) Shape(ctx context.Context, q Querier) (string, error) {
	var shape *string
	if err := q.QueryRow(ctx, "SELECT "+shapeExpr, t.OID).Scan(&shape); err != nil {
		return "", fmt.Errorf("read the columns of %s: %w", t.Qualified, err)
	}
	if shape == nil {
		return "", nil
	}
	return *shape, nil
}

// ShapeChanged reports whether err, from a statement that reads the source, is the server's refusal of a
// statement built for columns the table no longer has: an undefined column (42703), a column whose type
// no longer fits the statement (42804, 42883), a cached plan whose result type changed (0A000), or a table
// renamed or dropped since (42P01). The columns must be inspected again before the next read.
func ShapeChanged(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42703", "42804", "42883", "0A000", "42P01":
		return true
	}
	return false
}

// Need is a column a processor cannot read its records without, and its role in words.
type Need struct {
	Column string
	Role   string // e.g. "the order column", "the id column", "a column the handler reads"
}

// Wait is what keeps a stream from reading its source after its table changed: a column it needs is gone
// (Column), or the table no longer passes the checks of start-up (Column empty). The stream waits,
// skipping nothing, and reads on once the table fits again.
type Wait struct {
	Column  string
	Message string // what is wrong and what to do, in one line
}

// Reinspect checks the source again after its shape changed, with spec (the source as the running
// processor resolved it) and the columns it needs. It returns the table as it is now and every column it
// has (to name a renamed column in a later Wait), or a Wait when the table no longer fits: a needed column
// gone, or a check of start-up that fails now (a type, the index). last are the columns of the last
// inspection, to tell a renamed column from a dropped one. Other errors (the database's) are returned as
// they are.
func Reinspect(ctx context.Context, q Querier, spec inordertype.Source, needs []Need, last []Column) (*Table, []Column, *Wait, error) {
	rel, err := lookup(ctx, q, spec.Table)
	if errors.Is(err, ErrInvalidSource) {
		return nil, nil, &Wait{Message: err.Error() + "; the stream waits for it, skipping nothing"}, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	probe := &Table{OID: rel.oid, Qualified: rel.schema + "." + rel.name, Ident: pgx.Identifier{rel.schema, rel.name}.Sanitize()}
	all, _, err := columnsOf(ctx, q, probe)
	if err != nil {
		return nil, nil, nil, err
	}
	if w := missing(probe, all, needs, last); w != nil {
		return nil, all, w, nil
	}
	t, err := Inspect(ctx, q, spec)
	if errors.Is(err, ErrInvalidSource) {
		return nil, all, &Wait{Message: err.Error() + "; the stream waits for the table to fit again, skipping nothing"}, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return t, all, nil, nil
}

// missing is the Wait for the first of needs that t's columns (all) lack, or nil when none is missing.
func missing(t *Table, all []Column, needs []Need, last []Column) *Wait {
	have := map[string]bool{}
	byNum := map[int16]string{}
	for _, c := range all {
		have[c.Name] = true
		byNum[c.Num] = c.Name
	}
	for _, n := range needs {
		if n.Column == "" || have[n.Column] {
			continue
		}
		col := pgx.Identifier{n.Column}.Sanitize()
		ident := t.Ident
		fix := fmt.Sprintf("add it back (ALTER TABLE %s ADD COLUMN %s ...), or run the process with a configuration that does not need it", ident, col)
		for _, c := range last {
			if c.Name == n.Column && byNum[c.Num] != "" {
				fix = fmt.Sprintf("it was renamed to %q: rename it back (ALTER TABLE %s RENAME COLUMN %s TO %s), "+
					"or run the process with a configuration that names the new column", byNum[c.Num], ident,
					pgx.Identifier{byNum[c.Num]}.Sanitize(), col)
			}
		}
		return &Wait{Column: n.Column, Message: fmt.Sprintf("column %s.%s, %s, is gone: the stream waits, skipping nothing, "+
			"and reads on once it is back; %s", t.Qualified, n.Column, n.Role, fix)}
	}
	return nil
}

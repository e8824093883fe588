// Package source is the machinery that reads a source table: it checks the table against the catalog,
// builds the keyset read, watches the transactions in flight for the horizon, and answers the questions
// operator actions ask (where is a record, how far behind is a position, where does the table end).
// Processors and the cursor's actions share it; nothing in it is public API.
package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/inordertype"
)

// withDefaults fills in the columns a Source leaves empty that have a fixed default.
func withDefaults(s inordertype.Source) inordertype.Source {
	if s.IDColumn == "" {
		s.IDColumn = "id"
	}
	if s.CreatedAtColumn == "" {
		s.CreatedAtColumn = "created_at"
	}
	return s
}

// ErrInvalidSource is wrapped by every error about a source that cannot be read as configured: a missing
// table, column or index, or a column of the wrong type. Retrying does not help; fix the configuration.
var ErrInvalidSource = errors.New("invalid source")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSource, fmt.Sprintf(format, args...))
}

// Column is one column of a source table as the catalog describes it.
type Column struct {
	Name    string
	Num     int16
	Type    string // format_type, e.g. "bigint", "timestamp with time zone"
	TypName string // pg_type.typname, e.g. "int8", "jsonb"
	Default string
}

// Table is a validated source: resolved names, column types and the SQL that reads it.
type Table struct {
	OID       uint32
	Qualified string             // schema.table, for messages and status
	Ident     string             // sanitized identifier for SQL
	Spec      inordertype.Source // the source with defaults filled in (KeyColumn, trace columns resolved)
	Columns   []Column           // selected columns, in order
	IDCast    string             // the type $2 is cast to in the keyset comparison
	Part      *inordertype.Partition
	Warnings  []string // what is wrong but readable, for the start-up log

	CreatedAtNum int16               // attnum of the created_at column, to watch its default
	Default      string              // the created_at column's default at start-up
	Horizon      inordertype.Horizon // the horizon the source gets, never HorizonAuto
	// Clock is the table's insert clock, nil when it has none.
	Clock *Clock
	// Refusal, when set, is why a processor must not start on the source as configured, though it can be
	// read (an operator action reads it as its cursor row recorded it): a table without the insert clock
	// and no opt-in, or an opt-in that the table's clock makes wrong.
	Refusal error
	// All is every column of the table as Inspect found it, in table order, and InspectedShape their
	// fingerprint (see Shape), read in the same statement: a processor whose first poll finds that
	// fingerprint knows the columns are the ones it checked, and inspects them again only when it differs.
	All            []Column
	InspectedShape string

	createdAtType string // the created_at column's typname: timestamptz or timestamp
}

var idTypes = map[string]string{
	"int2": "smallint", "int4": "integer", "int8": "bigint", "uuid": "uuid", "text": "text", "varchar": "text",
}

// Inspect resolves and checks the source against the catalog: the table exists and can be read, the
// columns exist with usable types, and an index serves the keyset read.
func Inspect(ctx context.Context, conn Querier, src inordertype.Source) (*Table, error) {
	part := src.Partition
	src = withDefaults(src)
	if strings.TrimSpace(src.Table) == "" {
		return nil, invalid("no source table given")
	}
	rel, err := lookup(ctx, conn, src.Table)
	if err != nil {
		return nil, err
	}
	t := &Table{OID: rel.oid, Qualified: rel.schema + "." + rel.name, Ident: pgx.Identifier{rel.schema, rel.name}.Sanitize(), Spec: src}
	if rel.kind != "r" && rel.kind != "p" {
		return nil, invalid("%s is not a table (relkind %q); inorder reads plain or partitioned tables", t.Qualified, rel.kind)
	}
	if !rel.canSelect {
		return nil, invalid("the role cannot read %s: GRANT SELECT ON %s TO <role>", t.Qualified, t.Ident)
	}

	all, shape, err := columnsOf(ctx, conn, t)
	if err != nil {
		return nil, err
	}
	t.All, t.InspectedShape = all, shape
	if t.Clock, err = findClock(ctx, conn, t, all); err != nil {
		return nil, err
	}
	cac, idc, err := t.checkColumns(src, all)
	if err != nil {
		return nil, err
	}
	if err := t.checkIndex(ctx, conn, rel, part, cac, idc); err != nil {
		return nil, err
	}
	return t, nil
}

// columnsOf reads the table's columns, in table order, and their fingerprint (see Table.Shape).
func columnsOf(ctx context.Context, conn Querier, t *Table) ([]Column, string, error) {
	var shape *string
	rows, err := conn.Query(ctx, `
		SELECT a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), t.typname,
		       coalesce(pg_get_expr(d.adbin, d.adrelid), ''), `+shapeExpr+`
		FROM pg_attribute a
		JOIN pg_type t ON t.OID = a.atttypid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, t.OID)
	if err != nil {
		return nil, "", fmt.Errorf("inspect columns of %s: %w", t.Qualified, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Column, error) {
		var c Column
		err := r.Scan(&c.Name, &c.Num, &c.Type, &c.TypName, &c.Default, &shape)
		return c, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("inspect columns of %s: %w", t.Qualified, err)
	}
	if shape == nil {
		return all, "", nil
	}
	return all, *shape, nil
}

// checkColumns finds the id, created_at, key and selected columns among all, checks their types, chooses
// the horizon, and returns the created_at and id columns.
func (t *Table) checkColumns(src inordertype.Source, all []Column) (cac, idc Column, err error) {
	byName := map[string]Column{}
	for _, c := range all {
		byName[c.Name] = c
	}
	find := func(role, name string) (Column, error) {
		c, ok := byName[name]
		if !ok {
			return c, invalid("%s column %q does not exist in %s (columns: %s)", role, name, t.Qualified, names(all))
		}
		return c, nil
	}

	if idc, err = find("id", src.IDColumn); err != nil {
		return cac, idc, err
	}
	cast, ok := idTypes[idc.TypName]
	if !ok {
		return cac, idc, invalid("id column %s.%s is %s; it must be smallint, integer, bigint, uuid, text or varchar",
			t.Qualified, idc.Name, idc.Type)
	}
	t.IDCast = cast

	if cac, err = find("created_at", src.CreatedAtColumn); err != nil {
		return cac, idc, err
	}
	switch cac.TypName {
	case "timestamptz":
	case "timestamp":
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s.%s is timestamp without time zone: writers in sessions "+
			"with different TimeZone settings store incomparable values; prefer timestamptz", t.Qualified, cac.Name))
	default:
		return cac, idc, invalid("created_at column %s.%s is %s; it must be timestamptz or timestamp", t.Qualified, cac.Name, cac.Type)
	}
	t.CreatedAtNum, t.Default, t.createdAtType = cac.Num, cac.Default, cac.TypName
	if err := t.chooseHorizon(src.Horizon, cac); err != nil {
		return cac, idc, err
	}

	if src.KeyColumn == "" {
		if _, ok := byName["aggregate_id"]; ok {
			t.Spec.KeyColumn = "aggregate_id"
		}
	} else if _, err := find("key", src.KeyColumn); err != nil {
		return cac, idc, err
	}

	if err := t.findTraceColumns(src, byName, find); err != nil {
		return cac, idc, err
	}

	if len(src.Columns) == 0 {
		for _, c := range all {
			if t.Clock == nil || c.Name != ClockColumn { // the clock is inorder's, not the application's
				t.Columns = append(t.Columns, c)
			}
		}
		return cac, idc, nil
	}
	seen := map[string]bool{}
	for _, n := range src.Columns {
		c, err := find("selected", n)
		if err != nil {
			return cac, idc, err
		}
		if seen[n] {
			return cac, idc, invalid("column %q is selected twice", n)
		}
		seen[n] = true
		t.Columns = append(t.Columns, c)
	}
	return cac, idc, nil
}

// findTraceColumns resolves the trace context columns: the named ones must exist, and unnamed ones are
// traceparent and tracestate when the table has them.
func (t *Table) findTraceColumns(src inordertype.Source, byName map[string]Column, find func(role, name string) (Column, error)) error {
	for _, c := range []struct {
		role, def string
		name      *string
	}{{"trace", "traceparent", &t.Spec.TraceColumn}, {"trace state", "tracestate", &t.Spec.TraceStateColumn}} {
		if *c.name == "" {
			if _, ok := byName[c.def]; ok {
				*c.name = c.def
			}
			continue
		}
		if _, err := find(c.role, *c.name); err != nil {
			return err
		}
	}
	if t.Spec.TraceColumn == "" && src.TraceStateColumn != "" {
		return invalid("trace state column %q is named without a trace column: %s has no traceparent column, so name one with the trace column setting",
			src.TraceStateColumn, t.Qualified)
	}
	return nil
}

// checkIndex refuses a table without the index its reads need: (created_at, id) for a stream, the
// partition expression before them for a partition. The error says what to create.
func (t *Table) checkIndex(ctx context.Context, conn Querier, rel relation, part *inordertype.Partition, cac, idc Column) error {
	if part != nil {
		t.Part = part
		if t.Spec.KeyColumn == "" {
			return invalid("a partitioned process splits %s by its key column; the table has no aggregate_id, so name one with the key column setting", t.Qualified)
		}
		if part.Count < 1 || part.Index < 0 || part.Index >= part.Count {
			return invalid("partition %d of %d does not exist", part.Index, part.Count)
		}
		ok, err := hasPartitionIndex(ctx, conn, t, part.Count)
		if err != nil {
			return err
		}
		if !ok {
			return invalid("no index serves the partitioned read on %s; create one (or run inorder migrate --partition-index %s:%s:%d): %s",
				t.Qualified, t.Qualified, t.Spec.KeyColumn, part.Count,
				PartitionIndexSQL(t.Qualified, t.Spec.KeyColumn, t.AtExpr(""), idc.Name, part.Count))
		}
		return nil
	}
	if t.Horizon == inordertype.HorizonClock {
		return t.checkClockIndex(ctx, conn, idc)
	}
	var indexed bool
	err := conn.QueryRow(ctx, `
		SELECT EXISTS (
			SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
			WHERE i.indrelid = $1 AND am.amname = 'btree' AND i.indpred IS NULL AND i.indnkeyatts >= 2
			  AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $2)
			  AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $3)
			  AND i.indoption[0] & 1 = i.indoption[1] & 1)`, t.OID, cac.Name, idc.Name).Scan(&indexed)
	if err != nil {
		return fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	if !indexed {
		idx := pgx.Identifier{rel.name + "_" + cac.Name + "_" + idc.Name + "_idx"}.Sanitize()
		return invalid("no index serves the keyset read on %s; create one: CREATE INDEX CONCURRENTLY %s ON %s (%s, %s)",
			t.Qualified, idx, t.Ident, pgx.Identifier{cac.Name}.Sanitize(), pgx.Identifier{idc.Name}.Sanitize())
	}
	return nil
}

// checkClockIndex refuses a table with the insert clock but no index on (AtExpr, id), which `inorder
// migrate --table` creates with the clock.
func (t *Table) checkClockIndex(ctx context.Context, conn Querier, idc Column) error {
	rows, err := conn.Query(ctx, `
		SELECT pg_get_indexdef(i.indexrelid, 1, true)
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
		WHERE i.indrelid = $1 AND am.amname = 'btree' AND i.indpred IS NULL AND i.indnkeyatts >= 2 AND i.indisvalid
		  AND i.indkey[0] = 0 AND i.indkey[1] = $2 AND i.indoption[0] & 1 = i.indoption[1] & 1`, t.OID, idc.Num)
	if err != nil {
		return fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("inspect indexes of %s: %w", t.Qualified, err)
	}
	for _, d := range defs {
		if sameExpr(d, t.AtExpr("")) {
			return nil
		}
	}
	return invalid("no index serves the keyset read of %s by its insert clock; create it (online): %s",
		t.Qualified, AddClockCommand(t.Qualified))
}

// relation is a table as the catalog names it.
type relation struct {
	oid          uint32
	schema, name string
	kind         string // pg_class.relkind
	canSelect    bool
}

// lookup finds table in the catalog as the role sees it (search_path included).
func lookup(ctx context.Context, conn Querier, table string) (relation, error) {
	var r relation
	err := conn.QueryRow(ctx, `
		SELECT c.oid, n.nspname, c.relname, c.relkind::text, has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, table).Scan(&r.oid, &r.schema, &r.name, &r.kind, &r.canSelect)
	if errors.Is(err, pgx.ErrNoRows) {
		if near := nearestTable(ctx, conn, table); near != "" {
			return r, invalid("table %q does not exist (or is not on the search_path); did you mean %s?", table, near)
		}
		return r, invalid("table %q does not exist (or is not on the search_path)", table)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42602" || pgErr.Code == "3F000" || pgErr.Code == "42601") {
		return r, invalid("table %q: %s", table, pgErr.Message)
	}
	if err != nil {
		return r, fmt.Errorf("inspect table %q: %w", table, err)
	}
	return r, nil
}

// nearestTable is the table visible to the role (on the search_path, or in the schema table names) whose
// name is closest to table's, when one is close enough to be a typo of it: "" otherwise, and when the
// catalog cannot be read.
func nearestTable(ctx context.Context, conn Querier, table string) string {
	schema, _, qualified := strings.Cut(table, ".")
	if !qualified {
		schema = ""
	}
	rows, err := conn.Query(ctx, `
		SELECT CASE WHEN $1 = '' THEN c.relname ELSE n.nspname || '.' || c.relname END
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
		  AND CASE WHEN $1 = '' THEN pg_table_is_visible(c.oid) ELSE n.nspname = $1 END`, schema)
	if err != nil {
		return ""
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return ""
	}
	return Nearest(table, names)
}

// Nearest returns the one of names closest to name, ignoring case, when it is close enough to be a typo
// of it (an edit distance of at most a third of name's length, and at least 2); "" when none is.
func Nearest(name string, names []string) string {
	best, bestD := "", max(2, len([]rune(name))/3)+1
	for _, n := range names {
		if d := EditDistance(strings.ToLower(n), strings.ToLower(name)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b, in runes: how far a name given is from one
// that exists, for the "did you mean" of a refusal.
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur := make([]int, len(rb)+1)
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(rb)]
}

// timestampKind is what a created_at default expression gives a row.
type timestampKind int

const (
	kindNone        timestampKind = iota // no default: the application writes the column
	kindInsert                           // the time of the insert itself
	kindTransaction                      // the start of the transaction or statement
	kindOther                            // an expression this code does not know
)

// classify tells what a default expression, as pg_get_expr prints it, gives a row.
func classify(expr string) timestampKind {
	d := strings.ToLower(strings.TrimSpace(expr))
	if d == "" {
		return kindNone
	}
	// A timestamp column's default may carry a cast of the function's result.
	for _, cast := range []string{"::timestamp without time zone", "::timestamp with time zone"} {
		if strings.HasPrefix(d, "(") && strings.HasSuffix(d, ")"+cast) {
			d = strings.TrimSuffix(strings.TrimPrefix(d, "("), ")"+cast)
		}
	}
	switch d {
	case "clock_timestamp()":
		return kindInsert
	case "now()", "current_timestamp", "transaction_timestamp()", "statement_timestamp()", "localtimestamp":
		return kindTransaction
	}
	return kindOther
}

// ClockFix is the statement that makes created_at the time of the insert.
func (t *Table) ClockFix() string {
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT clock_timestamp() (no rewrite; existing rows keep their values)",
		t.Ident, pgx.Identifier{t.Spec.CreatedAtColumn}.Sanitize())
}

// chooseHorizon settles which horizon the source gets, from the setting, the table's insert clock and the
// created_at column's default, says what the choice costs, and sets Refusal where a processor must not
// start with it.
func (t *Table) chooseHorizon(set inordertype.Horizon, c Column) error {
	kind := classify(c.Default)
	col := t.Qualified + "." + c.Name
	if t.Clock != nil {
		switch set {
		case inordertype.HorizonAuto, inordertype.HorizonClock:
			t.Horizon = inordertype.HorizonClock
			if !t.Clock.Enabled {
				t.Warnings = append(t.Warnings, fmt.Sprintf("the insert clock's trigger on %s is disabled: the stream "+
					"waits until it is enabled again (ALTER TABLE %s ENABLE TRIGGER %s)", t.Qualified, t.Ident, quote(ClockTrigger)))
			}
			return nil
		}
		// An operator action reads such a source as its cursor row recorded it; a processor starts on the clock.
		t.Refusal = invalid("%s has inorder's insert clock, which orders it whoever writes created_at; the %s horizon "+
			"orders by created_at instead, and skips a row the application dates earlier than rows already read: "+
			"leave the horizon setting out", t.Qualified, set)
	} else if set == inordertype.HorizonClock {
		return invalid("%s has no insert clock; add it (online, no rewrite): %s", t.Qualified, AddClockCommand(t.Qualified))
	}
	switch set {
	case inordertype.HorizonAuto:
		// Read as before the clock (an operator action on a process recorded then); a processor refuses it.
		t.Horizon = inordertype.HorizonTransactions
		if kind == kindInsert {
			t.Horizon = inordertype.HorizonWriters
		}
		if t.Refusal == nil {
			t.Refusal = invalid("%s has no insert clock, so a created_at the application writes (an ORM writes it "+
				"whatever the column's default says) can date a row earlier than rows already delivered, and it "+
				"would be skipped; add the clock, online and without a rewrite: %s (or, if only the database "+
				"ever sets %s, opt in: --horizon writers for clock_timestamp(), transactions for now())",
				t.Qualified, AddClockCommand(t.Qualified), c.Name)
		}
		return nil
	case inordertype.HorizonWriters:
		if kind == kindTransaction || kind == kindOther {
			return invalid("%s defaults to %s, and rows that take this default would be skipped by the writers horizon, "+
				"which is only for a created_at set at the insert; use the transactions horizon, or: %s",
				col, c.Default, t.ClockFix())
		}
		t.Horizon = inordertype.HorizonWriters
		if kind == kindNone {
			t.Warnings = append(t.Warnings, fmt.Sprintf("%s has no default; the writers horizon is right only if every "+
				"writer sets it to clock_timestamp() (a transaction-time value such as now() can be skipped); prefer "+
				"the insert clock: %s", col, AddClockCommand(t.Qualified)))
		} else {
			t.Warnings = append(t.Warnings, fmt.Sprintf("%s orders the stream by its created_at, as opted in (the writers "+
				"horizon): a row the application dates itself, earlier than rows already read, is skipped; the insert "+
				"clock cannot be: %s", t.Qualified, AddClockCommand(t.Qualified)))
		}
		return nil
	case inordertype.HorizonTransactions:
		t.Horizon = inordertype.HorizonTransactions
	default:
		return invalid("horizon %q is none of auto, clock, writers and transactions", set)
	}
	switch kind {
	case kindInsert:
	case kindTransaction:
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s defaults to %s, the start of the transaction: no row that "+
			"takes the default is skipped, but the stream waits for every transaction open in the database (a report, "+
			"pg_dump, a session idle in transaction holds it), and rows of one key are delivered out of causal order "+
			"where writers of that key overlap; the insert clock has neither cost: %s", col, c.Default, AddClockCommand(t.Qualified)))
	case kindNone:
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s has no default, so the application writes it: inorder waits "+
			"for every transaction open in the database, which is right for now(); a value from the application's "+
			"own clock can be skipped; the insert clock cannot be: %s", col, AddClockCommand(t.Qualified)))
	default:
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s defaults to %s, which is not the database clock at insert: "+
			"inorder waits for every transaction open in the database, which covers any transaction-time value; "+
			"a value from outside the database can be skipped; the insert clock cannot be: %s", col, c.Default,
			AddClockCommand(t.Qualified)))
	}
	return nil
}

// WritersSafe reports whether the writers horizon still fits a created_at column whose default is now
// def: a default changed while a processor runs must never make it skip rows.
func (t *Table) WritersSafe(def string) bool {
	if def == t.Default {
		return true
	}
	switch classify(def) {
	case kindInsert:
		return true
	case kindNone:
		return t.Spec.Horizon == inordertype.HorizonWriters // the application said it writes clock_timestamp() itself
	}
	return false
}

func names(cs []Column) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return strings.Join(out, ", ")
}

// GenericExpr reports how a column is selected for a handlers.Row: natural types as they are, json as raw
// JSON text, everything else as text.
func GenericExpr(c Column) (expr string, raw bool) {
	cast, raw := genericCast(c)
	return pgx.Identifier{c.Name}.Sanitize() + cast, raw
}

// genericCast is the cast GenericExpr applies to a column, if any.
func genericCast(c Column) (cast string, raw bool) {
	switch c.TypName {
	case "int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar", "timestamptz", "timestamp", "bytea":
		return "", false
	case "json", "jsonb":
		return "::text", true
	default:
		return "::text", false
	}
}

// RowOverhead is what SizeExpr counts for a row besides its selected columns: the position, the key and
// the protocol's framing, roughly. It keeps a row of empty columns from counting as nothing.
const RowOverhead = 64

// SizeExpr is the expression of a row's size as a read bounded by bytes counts it, without reading any
// column's value: the sum of the selected columns' sizes, each from its header or its TOAST pointer alone.
// For text, varchar, bpchar and bytea that is octet_length, the size the value is sent at; for the other
// types it is pg_column_size, the size as stored, which for a compressed value (a large json or jsonb
// document, say) is below the size it is sent at. The reader learns that ratio from what it receives (see
// the processor's byte budget). Anything that decoded a value here (a cast to text, say) would read every
// row the window looks at in full, the ones that the budget then leaves out too.
func (t *Table) SizeExpr() string {
	var b strings.Builder
	// int, whose sum is a bigint: a bigint's sum is a numeric, several times slower to add up. A row of more
	// than 2 GiB could not be sent anyway.
	fmt.Fprintf(&b, "(%d", RowOverhead)
	for _, c := range t.Columns {
		f := "pg_column_size"
		switch c.TypName {
		case "text", "varchar", "bpchar", "bytea":
			f = "octet_length"
		}
		fmt.Fprintf(&b, " + coalesce(%s(src.%s), 0)", f, quote(c.Name))
	}
	b.WriteString(")")
	return b.String()
}

// ReadSQL builds the keyset read of at most limit rows after pos and below horizon, in (created_at, id)
// order, that stops before the first row which would take the batch past sized bytes as SizeExpr counts
// them (the first row is read whatever its size), and its arguments: sized is the reader's byte budget
// over the ratio it learned of received to counted bytes, not the budget itself. Every row starts with the
// Hidden columns (created_at, the id as text, the key, with a trace column the traceparent and the
// tracestate, as text, then the row's SizeExpr and whether a row follows it), then the selected columns.
//
// The bound by bytes is a window over the rows the limit reads: a running sum of their sizes, which reads
// no value, and a filter above it. Only the rows that pass the filter are sent, and only they have their
// values read (the generic read's casts to text are applied above the filter for that reason). The
// window costs the server about a third of a microsecond a row, a tenth of a stream of small records'
// time: sized zero or less reads without it (plainReadSQL), for a reader that knows its rows small.
func (t *Table) ReadSQL(generic bool, pos inordertype.Position, horizon time.Time, limit int, sized int64) (string, []any) {
	if sized <= 0 {
		return t.plainReadSQL(generic, pos, horizon, limit)
	}
	var b strings.Builder
	ca, id := t.AtExpr("src."), "src."+quote(t.Spec.IDColumn)
	b.WriteString("SELECT r.inorder_created_at, r.inorder_id, r.inorder_key")
	if t.Horizon == inordertype.HorizonClock {
		b.WriteString(", r.inorder_stamped")
	}
	if t.Spec.TraceColumn != "" {
		b.WriteString(", r.inorder_traceparent, r.inorder_tracestate")
	}
	b.WriteString(", r.inorder_size, r.inorder_more")
	for i, c := range t.Columns {
		cast := ""
		if generic {
			cast, _ = genericCast(c)
		}
		fmt.Fprintf(&b, ", r.inorder_c%d%s AS %s", i, cast, quote(c.Name))
	}
	b.WriteString(" FROM (")
	t.hiddenColumns(&b, true)
	fmt.Fprintf(&b, ", sum(%s) OVER w AS inorder_upto, %s AS inorder_rid", t.SizeExpr(), id)
	for i, c := range t.Columns {
		fmt.Fprintf(&b, ", src.%s AS inorder_c%d", quote(c.Name), i)
	}
	fmt.Fprintf(&b, " FROM %s AS src", t.Ident)
	after, args := t.After(pos, "src.", 1)
	fmt.Fprintf(&b, " WHERE %s AND ", after)
	if t.Part != nil {
		fmt.Fprintf(&b, "%s = %d AND ", t.PartExpr("src."), t.Part.Index)
	}
	n := len(args) + 1
	fmt.Fprintf(&b, "%s < $%d::timestamptz%s WINDOW w AS (ORDER BY %s, %s ROWS UNBOUNDED PRECEDING) ORDER BY %s, %s LIMIT $%d",
		ca, n, t.FilterCond(), ca, id, ca, id, n+1)
	// The first row passes whatever its size (nothing before it). Ordered by the subquery's own order, which
	// the planner sees it already has: no sort.
	fmt.Fprintf(&b, ") r WHERE r.inorder_upto = r.inorder_size OR r.inorder_upto <= $%d ORDER BY r.inorder_created_at, r.inorder_rid", n+2)
	return b.String(), append(args, horizon, limit, sized)
}

// plainReadSQL is ReadSQL without a bound by bytes: the same columns, whether a row follows unknown
// (false).
func (t *Table) plainReadSQL(generic bool, pos inordertype.Position, horizon time.Time, limit int) (string, []any) {
	var b strings.Builder
	t.selectFrom(&b, generic)
	after, args := t.After(pos, "src.", 1)
	fmt.Fprintf(&b, " WHERE %s AND ", after)
	if t.Part != nil {
		fmt.Fprintf(&b, "%s = %d AND ", t.PartExpr("src."), t.Part.Index)
	}
	ca, id := t.AtExpr("src."), "src."+quote(t.Spec.IDColumn)
	n := len(args) + 1
	fmt.Fprintf(&b, "%s < $%d::timestamptz%s ORDER BY %s, %s LIMIT $%d", ca, n, t.FilterCond(), ca, id, n+1)
	return b.String(), append(args, horizon, limit)
}

// RecordSQL builds the read of the one row at pos (a record's own position), with the columns ReadSQL
// selects: a parked record read again for its redrive.
func (t *Table) RecordSQL(generic bool, pos inordertype.Position) (string, []any) {
	var b strings.Builder
	t.selectFrom(&b, generic)
	fmt.Fprintf(&b, " WHERE %s = $1 AND src.%s = $2::text::%s", t.AtExpr("src."), quote(t.Spec.IDColumn), t.IDCast)
	return b.String(), []any{pos.CreatedAt, pos.ID}
}

// Layout says where a read's hidden columns are, the columns in front of the selected ones: the position
// (its time, AtExpr, and the id) and the key, then created_at when the insert clock orders the table, then
// the trace context (traceparent and tracestate) when the source has a trace column, then, in a read
// bounded by bytes (sized), the row's size (SizeExpr) and whether a row follows it below the horizon (a
// backlog lies behind the batch when its last row says so). A source without a trace column reads no
// trace columns at all, and a plain read no size: every byte counts through a slow link.
type Layout struct {
	// CreatedAt is created_at's column, -1 when the position's time is created_at itself.
	CreatedAt int
	// Trace is the traceparent's column, the tracestate's the next; -1 without a trace column.
	Trace int
	// Size is the row's size's column, whether a row follows the next; -1 in a plain read.
	Size int
	// Hidden is how many hidden columns there are.
	Hidden int
}

// Layout is the layout of a read's hidden columns, sized or not.
func (t *Table) Layout(sized bool) Layout {
	l := Layout{CreatedAt: -1, Trace: -1, Size: -1, Hidden: 3}
	if t.Horizon == inordertype.HorizonClock {
		l.CreatedAt, l.Hidden = l.Hidden, l.Hidden+1
	}
	if t.Spec.TraceColumn != "" {
		l.Trace, l.Hidden = l.Hidden, l.Hidden+2
	}
	if sized {
		l.Size, l.Hidden = l.Hidden, l.Hidden+2
	}
	return l
}

// Hidden is how many hidden columns a read has in front of the selected ones (see Layout).
func (t *Table) Hidden(sized bool) int { return t.Layout(sized).Hidden }

// textOrNull is the expression of an optional column as text: NULL when the source has none.
func textOrNull(col string) string {
	if col == "" {
		return "NULL::text"
	}
	return "src." + quote(col) + "::text"
}

// selectFrom writes the select list (the Hidden columns, then the selected columns) and the FROM
// clause of a read. Every column reference is qualified with the alias src: selected columns may be named
// like the position columns, and ORDER BY would otherwise resolve to an output column.
func (t *Table) selectFrom(b *strings.Builder, generic bool) {
	t.hiddenColumns(b, false)
	for _, c := range t.Columns {
		expr := quote(c.Name)
		if generic {
			expr, _ = GenericExpr(c)
		}
		fmt.Fprintf(b, ", src.%s AS %s", expr, quote(c.Name))
	}
	fmt.Fprintf(b, " FROM %s AS src", t.Ident)
}

// hiddenColumns writes "SELECT" and the Hidden columns of a read, sized or not (in a sized read, within
// the window w).
func (t *Table) hiddenColumns(b *strings.Builder, sized bool) {
	id := "src." + quote(t.Spec.IDColumn)
	key := textOrNull(t.Spec.KeyColumn)
	fmt.Fprintf(b, "SELECT %s AS inorder_created_at, %s::text AS inorder_id, %s AS inorder_key", t.AtExpr("src."), id, key)
	if t.Horizon == inordertype.HorizonClock {
		fmt.Fprintf(b, ", src.%s AS inorder_stamped", quote(t.Spec.CreatedAtColumn))
	}
	if t.Spec.TraceColumn != "" {
		fmt.Fprintf(b, ", %s AS inorder_traceparent, %s AS inorder_tracestate", textOrNull(t.Spec.TraceColumn), textOrNull(t.Spec.TraceStateColumn))
	}
	if sized {
		fmt.Fprintf(b, ", %s AS inorder_size, (lead(1) OVER w) IS NOT NULL AS inorder_more", t.SizeExpr())
	}
}

// Before returns the position just before the row at pos: that of the row before it, or the beginning
// when there is none. A prune bounded there keeps the row at pos.
func (t *Table) Before(ctx context.Context, q Querier, pos inordertype.Position) (inordertype.Position, error) {
	ca, id := t.AtExpr(""), quote(t.Spec.IDColumn)
	sql := fmt.Sprintf(`SELECT %[1]s::timestamptz, %[2]s::text FROM %[3]s
		WHERE (%[1]s, %[2]s) < ($1, $2::text::%[4]s) ORDER BY %[1]s DESC, %[2]s DESC LIMIT 1`, ca, id, t.Ident, t.IDCast)
	var at time.Time
	var prev inordertype.Position
	err := q.QueryRow(ctx, sql, pos.CreatedAt, pos.ID).Scan(&at, &prev.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return inordertype.Position{}, nil
	}
	if err != nil {
		return inordertype.Position{}, fmt.Errorf("find the row before %s in %s: %w", pos, t.Qualified, err)
	}
	prev.CreatedAt = at.UTC()
	return prev, nil
}

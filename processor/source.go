package processor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Source names the table a process reads and the columns that order it.
type Source struct {
	// Table is the source table, optionally schema-qualified ("bookings", "sales.bookings"); quote parts
	// that need it as in SQL ("\"Bookings\""). Plain and partitioned tables are supported. Required.
	Table string
	// IDColumn is the column that breaks ties on CreatedAtColumn; together they identify a row. Its type
	// must be smallint, integer, bigint, uuid, text or varchar. Empty means "id".
	IDColumn string
	// CreatedAtColumn orders the table; timestamptz (recommended) or timestamp, best with DEFAULT
	// clock_timestamp(). Empty means "created_at".
	CreatedAtColumn string
	// Horizon says which transactions a processor waits for before it reads past a time, from what
	// CreatedAtColumn holds. Empty (HorizonAuto) decides from the column's default at start-up:
	// HorizonWriters for clock_timestamp(), HorizonTransactions for anything else. Set it for an
	// application that writes created_at itself.
	Horizon Horizon
	// KeyColumn, when set, is passed to handlers as Record.Key (for example the aggregate id, used as the
	// Pub/Sub ordering key). Empty means "aggregate_id" when the table has such a column, else none.
	KeyColumn string
	// Partition, when set, narrows the source to one partition of a partitioned process: the rows whose
	// key column hashes to Partition.Index of Partition.Count (see PartitionExpr). NewPartitioned sets it
	// for each partition; set it yourself only to read a single partition.
	Partition *Partition
	// Columns are the columns selected for each record, in this order. Empty means, for a struct record
	// type scanned by name (no ScanFunc), the struct's columns (db tags, else field names); otherwise all
	// of the table's columns, in table order. Either way a missing column is an error at start-up.
	Columns []string
}

// Horizon says which transactions a processor waits for before it reads past a time: the ones that could
// still commit rows dated before it. See the package documentation, "The horizon".
type Horizon string

const (
	// HorizonAuto decides at start-up from the created_at column's default: HorizonWriters for
	// clock_timestamp(), HorizonTransactions for any other default, for none, and for an expression it does
	// not know.
	HorizonAuto Horizon = ""
	// HorizonWriters is for a created_at that is the time of the insert itself (clock_timestamp()): the
	// processor waits only for the transactions that write to the source table. Refused for a column
	// whose default is a transaction-time function, since rows taking that default would be skipped.
	HorizonWriters Horizon = "writers"
	// HorizonTransactions is for a created_at that may be as early as the start of its transaction or
	// statement (now(), current_timestamp, transaction_timestamp(), statement_timestamp()): the processor
	// waits for every transaction of the database that could still insert. Safe for any created_at set by
	// the database; the price is that any long transaction in the database holds the stream.
	HorizonTransactions Horizon = "transactions"
)

// ParseHorizon reads "auto", "writers" or "transactions".
func ParseHorizon(s string) (Horizon, error) {
	switch Horizon(s) {
	case "auto", HorizonAuto:
		return HorizonAuto, nil
	case HorizonWriters, HorizonTransactions:
		return Horizon(s), nil
	}
	return "", fmt.Errorf("horizon %q is none of auto, writers and transactions", s)
}

func (s Source) withDefaults() Source {
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

type column struct {
	name     string
	num      int16
	typ      string // format_type, e.g. "bigint", "timestamp with time zone"
	typname  string // pg_type.typname, e.g. "int8", "jsonb"
	default_ string
}

// table is a validated source: resolved names, column types and the SQL that reads it.
type table struct {
	oid       uint32
	qualified string // schema.table, for messages and status
	ident     string // sanitized identifier for SQL
	src       Source
	columns   []column // selected columns, in order
	idCast    string   // the type $2 is cast to in the keyset comparison
	part      *Partition
	warnings  []string

	createdAtNum int16  // attnum of the created_at column, to watch its default
	default_     string // the created_at column's default at start-up
	horizon      Horizon
}

var idTypes = map[string]string{
	"int2": "smallint", "int4": "integer", "int8": "bigint", "uuid": "uuid", "text": "text", "varchar": "text",
}

// inspect resolves and checks the source against the catalog: the table exists and can be read, the
// columns exist with usable types, and an index serves the keyset read.
func inspect(ctx context.Context, conn *pgx.Conn, src Source) (*table, error) {
	part := src.Partition
	src = src.withDefaults()
	if strings.TrimSpace(src.Table) == "" {
		return nil, invalid("no source table given")
	}
	var (
		oid          uint32
		schema, name string
		kind         string
		canSelect    bool
	)
	err := conn.QueryRow(ctx, `
		SELECT c.oid, n.nspname, c.relname, c.relkind::text, has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, src.Table).Scan(&oid, &schema, &name, &kind, &canSelect)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, invalid("table %q does not exist (or is not on the search_path)", src.Table)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42602" || pgErr.Code == "3F000" || pgErr.Code == "42601") {
		return nil, invalid("table %q: %s", src.Table, pgErr.Message)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect table %q: %w", src.Table, err)
	}
	t := &table{oid: oid, qualified: schema + "." + name, ident: pgx.Identifier{schema, name}.Sanitize(), src: src}
	if kind != "r" && kind != "p" {
		return nil, invalid("%s is not a table (relkind %q); inorder reads plain or partitioned tables", t.qualified, kind)
	}
	if !canSelect {
		return nil, invalid("the role cannot read %s: GRANT SELECT ON %s TO <role>", t.qualified, t.ident)
	}

	rows, err := conn.Query(ctx, `
		SELECT a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), t.typname,
		       coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a
		JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("inspect columns of %s: %w", t.qualified, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.name, &c.num, &c.typ, &c.typname, &c.default_)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("inspect columns of %s: %w", t.qualified, err)
	}
	byName := map[string]column{}
	for _, c := range all {
		byName[c.name] = c
	}
	find := func(role, name string) (column, error) {
		c, ok := byName[name]
		if !ok {
			return c, invalid("%s column %q does not exist in %s (columns: %s)", role, name, t.qualified, names(all))
		}
		return c, nil
	}

	idc, err := find("id", src.IDColumn)
	if err != nil {
		return nil, err
	}
	cast, ok := idTypes[idc.typname]
	if !ok {
		return nil, invalid("id column %s.%s is %s; it must be smallint, integer, bigint, uuid, text or varchar",
			t.qualified, idc.name, idc.typ)
	}
	t.idCast = cast

	cac, err := find("created_at", src.CreatedAtColumn)
	if err != nil {
		return nil, err
	}
	switch cac.typname {
	case "timestamptz":
	case "timestamp":
		t.warnings = append(t.warnings, fmt.Sprintf("%s.%s is timestamp without time zone: writers in sessions "+
			"with different TimeZone settings store incomparable values; prefer timestamptz", t.qualified, cac.name))
	default:
		return nil, invalid("created_at column %s.%s is %s; it must be timestamptz or timestamp", t.qualified, cac.name, cac.typ)
	}
	t.createdAtNum, t.default_ = cac.num, cac.default_
	if err := t.chooseHorizon(src.Horizon, cac); err != nil {
		return nil, err
	}

	if src.KeyColumn == "" {
		if _, ok := byName["aggregate_id"]; ok {
			t.src.KeyColumn = "aggregate_id"
		}
	} else if _, err := find("key", src.KeyColumn); err != nil {
		return nil, err
	}

	if len(src.Columns) == 0 {
		t.columns = all
	} else {
		seen := map[string]bool{}
		for _, n := range src.Columns {
			c, err := find("selected", n)
			if err != nil {
				return nil, err
			}
			if seen[n] {
				return nil, invalid("column %q is selected twice", n)
			}
			seen[n] = true
			t.columns = append(t.columns, c)
		}
	}

	var indexed bool
	err = conn.QueryRow(ctx, `
		SELECT EXISTS (
			SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
			WHERE i.indrelid = $1 AND am.amname = 'btree' AND i.indpred IS NULL AND i.indnkeyatts >= 2
			  AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $2)
			  AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = $1 AND attname = $3)
			  AND i.indoption[0] & 1 = i.indoption[1] & 1)`, oid, cac.name, idc.name).Scan(&indexed)
	if err != nil {
		return nil, fmt.Errorf("inspect indexes of %s: %w", t.qualified, err)
	}
	if part != nil {
		t.part = part
		if t.src.KeyColumn == "" {
			return nil, invalid("a partitioned process splits %s by its key column; the table has no aggregate_id, so name one with the key column setting", t.qualified)
		}
		if part.Count < 1 || part.Index < 0 || part.Index >= part.Count {
			return nil, invalid("partition %d of %d does not exist", part.Index, part.Count)
		}
		ok, err := hasPartitionIndex(ctx, conn, t, part.Count)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, invalid("no index serves the partitioned read on %s; create one (or run inorder migrate --partition-index %s:%s:%d): %s",
				t.qualified, t.qualified, t.src.KeyColumn, part.Count,
				PartitionIndexSQL(t.qualified, t.src.KeyColumn, cac.name, idc.name, part.Count))
		}
		return t, nil
	}
	if !indexed {
		idx := pgx.Identifier{name + "_" + cac.name + "_" + idc.name + "_idx"}.Sanitize()
		return nil, invalid("no index serves the keyset read on %s; create one: CREATE INDEX CONCURRENTLY %s ON %s (%s, %s)",
			t.qualified, idx, t.ident, pgx.Identifier{cac.name}.Sanitize(), pgx.Identifier{idc.name}.Sanitize())
	}
	return t, nil
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

// clockFix is the statement that makes created_at the time of the insert.
func (t *table) clockFix() string {
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT clock_timestamp() (no rewrite; existing rows keep their values)",
		t.ident, pgx.Identifier{t.src.CreatedAtColumn}.Sanitize())
}

// chooseHorizon settles which horizon the source gets, from the setting and the created_at column's
// default, and says what the choice costs.
func (t *table) chooseHorizon(set Horizon, c column) error {
	kind := classify(c.default_)
	col := t.qualified + "." + c.name
	switch set {
	case HorizonAuto:
		if kind == kindInsert {
			t.horizon = HorizonWriters
			return nil
		}
		t.horizon = HorizonTransactions
	case HorizonWriters:
		if kind == kindTransaction || kind == kindOther {
			return invalid("%s defaults to %s, and rows that take this default would be skipped by the writers horizon, "+
				"which is only for a created_at set at the insert; use the transactions horizon, or: %s",
				col, c.default_, t.clockFix())
		}
		t.horizon = HorizonWriters
		if kind == kindNone {
			t.warnings = append(t.warnings, fmt.Sprintf("%s has no default; the writers horizon is right only if every "+
				"writer sets it to clock_timestamp() (a transaction-time value such as now() can be skipped); prefer: %s",
				col, t.clockFix()))
		}
		return nil
	case HorizonTransactions:
		t.horizon = HorizonTransactions
	default:
		return invalid("horizon %q is none of auto, writers and transactions", set)
	}
	switch kind {
	case kindInsert:
	case kindTransaction:
		t.warnings = append(t.warnings, fmt.Sprintf("%s defaults to %s, the start of the transaction: no row is "+
			"skipped, but the stream waits for every transaction open in the database (a report, pg_dump, a session "+
			"idle in transaction holds it), and rows of one key are delivered out of causal order where writers of "+
			"that key overlap; prefer: %s", col, c.default_, t.clockFix()))
	case kindNone:
		t.warnings = append(t.warnings, fmt.Sprintf("%s has no default, so the application writes it: inorder waits "+
			"for every transaction open in the database, which is right for now(); if writers set clock_timestamp(), "+
			"the writers horizon waits only for them; a value from the application's own clock can be skipped "+
			"whatever the horizon; prefer: %s", col, t.clockFix()))
	default:
		t.warnings = append(t.warnings, fmt.Sprintf("%s defaults to %s, which is not the database clock at insert: "+
			"inorder waits for every transaction open in the database, which covers any transaction-time value; "+
			"a value from outside the database can be skipped; prefer: %s", col, c.default_, t.clockFix()))
	}
	return nil
}

// writersSafe reports whether the writers horizon still fits a created_at column whose default is now
// def: a default changed while a processor runs must never make it skip rows.
func (t *table) writersSafe(def string) bool {
	if def == t.default_ {
		return true
	}
	switch classify(def) {
	case kindInsert:
		return true
	case kindNone:
		return t.src.Horizon == HorizonWriters // the application said it writes clock_timestamp() itself
	}
	return false
}

func names(cs []column) string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return strings.Join(out, ", ")
}

// generic reports how a column is selected for a handlers.Row: natural types as they are, json as raw
// JSON text, everything else as text.
func genericExpr(c column) (expr string, raw bool) {
	id := pgx.Identifier{c.name}.Sanitize()
	switch c.typname {
	case "int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar", "timestamptz", "timestamp", "bytea":
		return id, false
	case "json", "jsonb":
		return id + "::text", true
	default:
		return id + "::text", false
	}
}

// readSQL builds the keyset read. Parameters: $1 position created_at, $2 position id (text), $3 horizon,
// $4 limit. which selects the position form: 0 from the beginning, 1 after a time only, 2 after a pair.
func (t *table) readSQL(generic bool, which int) string {
	// Every column reference is qualified with the alias src: selected columns may be named like the
	// position columns, and ORDER BY would otherwise resolve to an output column.
	ca := "src." + pgx.Identifier{t.src.CreatedAtColumn}.Sanitize()
	id := "src." + pgx.Identifier{t.src.IDColumn}.Sanitize()
	key := "NULL::text"
	if t.src.KeyColumn != "" {
		key = "src." + pgx.Identifier{t.src.KeyColumn}.Sanitize() + "::text"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s AS inorder_created_at, %s::text AS inorder_id, %s AS inorder_key", ca, id, key)
	for _, c := range t.columns {
		expr := pgx.Identifier{c.name}.Sanitize()
		if generic {
			expr, _ = genericExpr(c)
		}
		fmt.Fprintf(&b, ", src.%s AS %s", expr, pgx.Identifier{c.name}.Sanitize())
	}
	fmt.Fprintf(&b, " FROM %s AS src WHERE ", t.ident)
	switch which {
	case 1:
		fmt.Fprintf(&b, "%s > $1 AND $2::text IS NULL AND ", ca)
	case 2:
		fmt.Fprintf(&b, "(%s, %s) > ($1, $2::text::%s) AND ", ca, id, t.idCast)
	default:
		b.WriteString("$1::timestamptz IS NULL AND $2::text IS NULL AND ")
	}
	if t.part != nil {
		fmt.Fprintf(&b, "%s = %d AND ", t.partitionExpr("src."), t.part.Index)
	}
	fmt.Fprintf(&b, "%s < $3::timestamptz ORDER BY %s, %s LIMIT $4", ca, ca, id)
	return b.String()
}

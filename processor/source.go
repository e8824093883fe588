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
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname,
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
		err := r.Scan(&c.name, &c.typ, &c.typname, &c.default_)
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
	if w := defaultWarning(t.qualified, cac); w != "" {
		t.warnings = append(t.warnings, w)
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

// defaultWarning explains what is wrong with a created_at column's default, or returns "".
func defaultWarning(table string, c column) string {
	d := strings.ToLower(c.default_)
	fix := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT clock_timestamp()", table, pgx.Identifier{c.name}.Sanitize())
	switch {
	case strings.Contains(d, "clock_timestamp()"):
		return ""
	case strings.Contains(d, "now()"), strings.Contains(d, "current_timestamp"), strings.Contains(d, "transaction_timestamp()"):
		return fmt.Sprintf("%s.%s defaults to the transaction start time (%s): rows of one transaction tie, and a "+
			"writer that waited for another on a row lock can get an earlier time than it, breaking causal order; "+
			"prefer: %s", table, c.name, c.default_, fix)
	case d == "":
		return fmt.Sprintf("%s.%s has no default: if the application sets it from its own clock, no horizon can "+
			"tell when all earlier rows are visible and rows can be skipped; set it in the database: %s", table, c.name, fix)
	default:
		return fmt.Sprintf("%s.%s defaults to %s, not the database clock: rows can be skipped; set: %s",
			table, c.name, c.default_, fix)
	}
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

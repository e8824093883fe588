package processor

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/inorder-dev/inorder/internal/source"
)

// structField is a column a struct type scans with pgx.RowToStructByName, and where in the struct it goes.
type structField struct {
	column string
	index  []int
}

// structColumns lists the columns a struct type scans with pgx.RowToStructByName: each exported field's
// db tag, or its name where it has none, recursing into embedded structs and skipping `db:"-"`.
func structColumns(t reflect.Type, prefix []int) []structField {
	var cols []structField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("db")
		name, _, _ := strings.Cut(tag, ",")
		index := append(append([]int(nil), prefix...), i)
		switch {
		case name == "-":
		case f.Anonymous && f.Type.Kind() == reflect.Struct && !hasTag:
			cols = append(cols, structColumns(f.Type, index)...)
		case !f.IsExported():
		case name != "":
			cols = append(cols, structField{name, index})
		default:
			cols = append(cols, structField{f.Name, index})
		}
	}
	return cols
}

// positionalScanner scans rows whose columns are exactly a struct's fields in order (the selection made
// from the struct itself), so it needs no matching of names per row, unlike pgx.RowToStructByName. Each
// field is decoded from the row's bytes with a plan made once for its column's type (again if the type
// changes), as pgx's Rows.Scan does, without building the row's list of destinations each time.
type positionalScanner[T any] struct {
	fields []structField
	plans  []fieldPlan
}

// fieldPlan is how a field is decoded from its column: the plan, and the column's type it was made for.
type fieldPlan struct {
	plan   pgtype.ScanPlan
	oid    uint32
	format int16
}

func (s *positionalScanner[T]) scanInto(row pgx.CollectableRow, v *T) error {
	fds, raw := row.FieldDescriptions(), row.RawValues()
	c, ok := row.(interface{ Conn() *pgx.Conn })
	if !ok || c.Conn() == nil || len(fds) != len(s.fields) || len(raw) != len(fds) {
		return s.scanArgs(row, v) // pgx's own error for what does not match
	}
	m := c.Conn().TypeMap()
	if len(s.plans) != len(s.fields) {
		s.plans = make([]fieldPlan, len(s.fields))
	}
	rv := reflect.ValueOf(v).Elem()
	for i, f := range s.fields {
		dst := rv.FieldByIndex(f.index).Addr().Interface()
		fp := &s.plans[i]
		if fp.plan == nil || fp.oid != fds[i].DataTypeOID || fp.format != fds[i].Format {
			*fp = fieldPlan{plan: m.PlanScan(fds[i].DataTypeOID, fds[i].Format, dst), oid: fds[i].DataTypeOID, format: fds[i].Format}
		}
		if err := fp.plan.Scan(raw[i], dst); err != nil {
			return pgx.ScanArgError{ColumnIndex: i, FieldName: fds[i].Name, Err: err}
		}
	}
	return nil
}

// scanArgs scans row into v's fields through the row's own Scan.
func (s *positionalScanner[T]) scanArgs(row pgx.CollectableRow, v *T) error {
	rv := reflect.ValueOf(v).Elem()
	args := make([]any, 0, len(s.fields))
	for _, f := range s.fields {
		args = append(args, rv.FieldByIndex(f.index).Addr().Interface())
	}
	return row.Scan(args...)
}

// matchFields orders a struct's fields as the selected columns are, matching names as pgx does (exactly,
// else case-insensitively without underscores). It reports false unless columns and fields pair up one to
// one, in which case pgx.RowToStructByName stays the scanner, with its own error for what does not match.
func matchFields(fields []structField, selected []source.Column) ([]structField, bool) {
	if len(fields) != len(selected) {
		return nil, false
	}
	used := make([]bool, len(fields))
	out := make([]structField, len(selected))
	for i, c := range selected {
		found := -1
		for j, f := range fields {
			if !used[j] && f.column == c.Name {
				found = j
				break
			}
		}
		for j, f := range fields {
			if found < 0 && !used[j] && sameName(f.column, c.Name) {
				found = j
			}
		}
		if found < 0 {
			return nil, false
		}
		used[found], out[i] = true, fields[found]
	}
	return out, true
}

// resolveColumns maps names derived from a struct to the table's columns the way pgx matches them: case
// insensitively, and ignoring underscores for names without a db tag.
func resolveColumns(fields []structField, table []source.Column) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.column
		for _, c := range table {
			if c.Name == f.column {
				out[i] = c.Name
				break
			}
			if sameName(c.Name, f.column) {
				out[i] = c.Name
			}
		}
	}
	return out
}

// sameName is pgx's loose match of a field name to a column name: case-insensitive, underscores ignored.
func sameName(a, b string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	return norm(a) == norm(b)
}

// checkColumns finds at start what would otherwise fail at the first record, and halt the stream on it: a
// struct whose fields do not pair up with the selected columns, and a column the handler reads by name
// (handlers.ColumnReader) that is not selected. Either is an ErrInvalidSource naming the selected columns.
func (rd *reader[T]) checkColumns(t *source.Table) error {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	selected := strings.Join(names, ", ")
	if rd.structCols != nil && !rd.custom && rd.positional == nil {
		var noColumn, noField []string
		for _, f := range rd.structCols {
			if !slices.ContainsFunc(names, func(n string) bool { return n == f.column || sameName(n, f.column) }) {
				noColumn = append(noColumn, f.column)
			}
		}
		for _, n := range names {
			if !slices.ContainsFunc(rd.structCols, func(f structField) bool { return n == f.column || sameName(n, f.column) }) {
				noField = append(noField, n)
			}
		}
		var zero T
		return fmt.Errorf("%w: %T does not match the columns read from %s (%s): fields without a column: [%s]; "+
			"columns without a field: [%s]; set Source.Columns to the struct's columns, or tag the fields with db:\"column\"",
			ErrInvalidSource, zero, t.Qualified, selected, strings.Join(noColumn, ", "), strings.Join(noField, ", "))
	}
	if rd.columns != nil {
		for _, c := range rd.columns.ReadsColumns() {
			if !slices.Contains(names, c) {
				return fmt.Errorf("%w: the handler reads column %q, which is not among the columns read from %s: %s",
					ErrInvalidSource, c, t.Qualified, selected)
			}
		}
	}
	return nil
}

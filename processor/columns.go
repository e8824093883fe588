package processor

import (
	"reflect"
	"strings"
)

// structColumns lists the columns a struct type scans with pgx.RowToStructByName: each exported field's
// db tag, or its name where it has none, recursing into embedded structs and skipping `db:"-"`.
func structColumns(t reflect.Type) []string {
	var cols []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("db")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case name == "-":
		case f.Anonymous && f.Type.Kind() == reflect.Struct && !hasTag:
			cols = append(cols, structColumns(f.Type)...)
		case !f.IsExported():
		case name != "":
			cols = append(cols, name)
		default:
			cols = append(cols, f.Name)
		}
	}
	return cols
}

// resolveColumns maps names derived from a struct to the table's columns the way pgx matches them: case
// insensitively, and ignoring underscores for names without a db tag.
func resolveColumns(names []string, table []column) []string {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		for _, c := range table {
			if c.name == n {
				out[i] = c.name
				break
			}
			if norm(c.name) == norm(n) {
				out[i] = c.name
			}
		}
	}
	return out
}

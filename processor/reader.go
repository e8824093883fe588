package processor

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// reader reads a process's records from its source table: it owns the table as last inspected, how its
// rows are scanned into T, the bounds of a read (the batch bound and the byte budget, see budget.go), the
// batch read ahead (ahead.go), and what it knows of the source's columns across migrations (shape.go).
// The processor asks it for a batch; it neither delivers nor commits anything.
type reader[T any] struct {
	process string
	// src is the source as configured (Config.Source), and columns is the handler's
	// handlers.ColumnReader, nil when it reads no column by name.
	src     inordertype.Source
	columns handlers.ColumnReader
	// custom says that Config.ScanFunc scans the rows; generic that T is handlers.Row.
	custom, generic bool
	scan            func(row pgx.CollectableRow) (T, error)
	// structCols are the columns of T when it is a struct scanned by name: the default Source.Columns.
	structCols []structField
	positional *positionalScanner[T] // set when the selection is structCols: scan by position
	// table is the source as last inspected (at start, and again after a migration: see adopt).
	table *source.Table
	// batchSize is Config.BatchSize (zero: the adaptive bound, limit), and minLimit the least bound of a
	// read (a keyed window's, see nextBounds).
	batchSize, minLimit int
	// limit is the adaptive read bound (Config.BatchSize zero): 0 until the first read. lastFull is whether
	// the last read was cut by its bound or its budget (a backlog lies behind it).
	limit    int
	lastFull bool
	// budget is the byte budget of a read (Config.BatchBytes) and the size ratio learned.
	budget byteBudget
	// readsAhead says that the delivery leaves the connection free while a batch is delivered (see
	// ahead.go), and ahead is the next batch, read while the last one was delivered; nil when none. A batch
	// read in another tenure is read again.
	readsAhead bool
	ahead      *ahead[T]
	// shape is what the reader knows of the source's columns across migrations (see shape.go), and
	// holdWarnAfter how often a wait for them is said again.
	shape         shapeWatch
	holdWarnAfter time.Duration
	cur           *store.Repository // set when the processor opens its cursor
	log           zerolog.Logger
	obs           Observer
}

// newReader returns the reader of a processor configured by cfg (its defaults set), or an error when T
// cannot be scanned without a Config.ScanFunc.
func newReader[T any](cfg *Config[T], log zerolog.Logger, obs Observer) (reader[T], error) {
	rd := reader[T]{process: cfg.Process, src: cfg.Source, custom: cfg.ScanFunc != nil, batchSize: cfg.BatchSize,
		budget: byteBudget{bytes: int64(cfg.BatchBytes)}, holdWarnAfter: cfg.HoldWarnAfter, log: log, obs: obs}
	h := any(cfg.Handler)
	if h == nil {
		h = cfg.TxHandler
	}
	rd.columns, _ = h.(handlers.ColumnReader)
	_, async := cfg.Handler.(handlers.AsyncHandler[T])
	windowed := cfg.MaxInFlight > 1 && cfg.Handler != nil && !async
	if windowed {
		rd.minLimit = 16 * cfg.MaxInFlight
	}
	rd.readsAhead = cfg.Handler != nil && !async && !windowed && cfg.Checkpoint == CheckpointBatch &&
		cfg.OnHalt != OnHaltPark
	var zero T
	_, rd.generic = any(zero).(handlers.Row)
	switch {
	case cfg.ScanFunc != nil:
		rd.scan = cfg.ScanFunc
	case rd.generic:
		// Set in prepareScan, once the table's json columns are known.
	case reflect.TypeOf(zero) != nil && reflect.TypeOf(zero).Kind() == reflect.Struct:
		rd.scan = pgx.RowToStructByName[T]
		rd.structCols = structColumns(reflect.TypeOf(zero), nil)
	default:
		return reader[T]{}, fmt.Errorf("processor %q: %T is not a struct; set Config.ScanFunc", cfg.Process, zero)
	}
	return rd, nil
}

// inspect inspects the source at start: the table, its columns (a struct's fields resolved to them), its
// index and horizon, and the filter, which must be the one the cursor row recorded.
func (rd *reader[T]) inspect(ctx context.Context) (*source.Table, error) {
	src := rd.src
	if len(src.Columns) == 0 && rd.structCols != nil && !rd.custom {
		var err error
		src.Columns, err = rd.columnsOfStruct(ctx)
		if err != nil {
			return nil, err
		}
	}
	conn, err := rd.cur.Session.Conn(ctx)
	if err != nil {
		return nil, err
	}
	t, err := source.Inspect(ctx, conn, src)
	if err == nil && t.Refusal != nil {
		err = t.Refusal
	}
	if err == nil {
		err = rd.checkFilter(ctx, conn, t)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// prepareScan chooses how the rows of t are scanned into T: raw columns of a generic record kept as they
// are, and a struct scanned by position when its fields and the selected columns match one for one.
func (rd *reader[T]) prepareScan(t *source.Table) {
	if rd.generic && !rd.custom {
		var raw []int
		for i, c := range t.Columns {
			if _, isRaw := source.GenericExpr(c); isRaw {
				raw = append(raw, i)
			}
		}
		rd.scan = any(rowScanner(raw)).(func(pgx.CollectableRow) (T, error))
	}
	if rd.structCols != nil && !rd.custom {
		// When every selected column is one field of T and every field has its column, scanning by
		// position gives what RowToStructByName gives, without matching names for each row.
		if fields, ok := matchFields(rd.structCols, t.Columns); ok {
			rd.positional = &positionalScanner[T]{fields: fields}
		}
	}
}

// columnsOfStruct resolves the struct's fields to the table's column names, so that the read selects just
// what RowToStructByName fills, and a field without a column is reported at start, naming both.
func (rd *reader[T]) columnsOfStruct(ctx context.Context) ([]string, error) {
	conn, err := rd.cur.Session.Conn(ctx)
	if err != nil {
		return nil, err
	}
	t, err := source.Inspect(ctx, conn, inordertype.Source{Table: rd.src.Table, IDColumn: rd.src.IDColumn,
		CreatedAtColumn: rd.src.CreatedAtColumn, KeyColumn: rd.src.KeyColumn})
	if err != nil {
		return nil, err
	}
	return resolveColumns(rd.structCols, t.Columns), nil
}

package cursor

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/source"
	"github.com/inorder-dev/inorder/internal/store"
)

// Info is what the database says about one process, read without disturbing it. It encodes to JSON as
// `inorder status --json` prints a process (MarshalJSON), so that an admin endpoint can serve it as it is.
type Info struct {
	Process string
	inordertype.State
	// Status is what the process is doing, by the rules `inorder status` shows. For a stream an
	// instance runs, not paused nor failing, whether any row is behind tells running (or held) from idle:
	// Read looks (CaughtUp), and Measure, which counts the rows, decides it again with the count.
	Status StreamStatus
	// CaughtUp reports that no committed row of the source was after the position when Read or Measure
	// last looked. Read looks only where the status turns on it (a stream an instance runs, not paused
	// nor failing, whose source is known); elsewhere it is false until Measure.
	CaughtUp bool
	// Lag is how far behind the process is, once Measure has read it; nil before. LagError is why Measure,
	// or Read's look for a row behind, could not read it.
	Lag      *Lag
	LagError string
	// Source is what the process last ran against; its Table is empty until it first locked its cursor.
	Source inordertype.Source
	// Partitions is set on the parent row of a partitioned process: how many partitions it has.
	Partitions int
	// Locked reports whether an instance owns the process now: its lease runs, and, if it said it holds
	// the process's advisory lock on a direct connection, that session is still there.
	Locked bool
	// Holder is the instance that owns the process (its --instance, or host:pid), and HolderPID the backend
	// of its cursor connection when it is direct (0 through a pooler, where no session stays its own).
	Holder    string
	HolderPID int
	// Epoch counts the changes of owner: it grows by one each time an instance takes the process.
	// OwnerSince is when the owner took it, and LeaseExpiresAt when its lease runs out unless renewed
	// (zero when the last owner gave it up at a clean stop).
	Epoch          int64
	OwnerSince     time.Time
	LeaseExpiresAt time.Time
	// Connected counts the instances running this process (the holder and the ones standing by): each
	// says so in the instances table at a third of its lease and removes its row when it stops, so one that
	// vanished counts until its lease would have run out.
	Connected int
	// HeldSince, when not zero, is since when an open transaction has held the horizon back, and
	// HeldByPID its backend (0 for a prepared transaction).
	HeldByPID int
	HeldSince time.Time
	// SourceWait, when not empty, says that the stream waits for its source table to fit again after a
	// migration (a column it needs dropped or renamed): which column, and what to do. The stream reads on
	// by itself once the table fits.
	SourceWait string
	UpdatedAt  time.Time
	// InFlight counts the records a keyed window had in flight at the process's last checkpoint, and
	// InFlightSince is since when the oldest of them had been (see processor.Config.MaxInFlight).
	InFlight      int
	InFlightSince time.Time
	// ParkedKeys and ParkedRecords count the keys parked in the stream and their records (see Parked);
	// ParkedSince is when the longest parked of them was parked, and OldestParked the first parked record
	// in the stream's order, whose row a prune keeps.
	ParkedKeys    int
	ParkedRecords int
	ParkedSince   time.Time
	OldestParked  *inordertype.Position
	// LateRows counts the rows a processor found committed behind the position after it had passed them,
	// and LateAt is when it last found one (zero when it never did). With the insert clock there should be
	// none; with the writers or transactions opt-in, a created_at the application wrote early makes them.
	// They were not delivered: the processor's log says where they lie, and a rewind delivers them.
	LateRows int64
	LateAt   time.Time
	// RecordsHandled counts the records the process advanced past since it was registered.
	RecordsHandled int64
	// Throughput is records per second over roughly the last minute (one to two minutes of history).
	Throughput float64
}

// list reads every process's cursor row, or only the named one when name is not empty (with the rows of
// its partitions too when partitions is set), for Read.
func list(ctx context.Context, db DB, name string, partitions bool) ([]Info, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("read cursors: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	rows, err := store.ListCursors(ctx, tx, name, partitions)
	if err != nil {
		return nil, fmt.Errorf("read cursors: %w", err)
	}
	live, err := store.LiveInstances(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("count instances: %w", err)
	}
	infos := make([]Info, len(rows))
	for i, c := range rows {
		in := &infos[i]
		*in = infoOf(c)
		if in.Locked && c.OwnerSession {
			if err := holderOnSession(ctx, tx, in); err != nil {
				return nil, err
			}
		}
		in.Connected = live[in.Process]
		if st := statusOf(*in, nil); (st == StatusRunning || st == StatusHeld) && in.Source.Table != "" {
			// Running, held and idle differ only by the rows behind: look whether there is one.
			if err := in.lookBehind(ctx, tx); err != nil {
				in.LagError = err.Error() // the status stays as without the rows behind
			}
		}
		in.Status = statusOf(*in, nil)
	}
	return infos, nil
}

// infoOf is what a cursor row says of its process, before the look at its owner's session and at the
// rows behind.
func infoOf(c store.CursorRow) Info {
	in := Info{Process: c.Name, State: c.State, Partitions: c.Partitions, Source: c.Source,
		Locked: c.LeaseRuns, HeldByPID: c.HeldByPID, HeldSince: c.HeldSince, SourceWait: c.SourceWait, UpdatedAt: c.UpdatedAt,
		Epoch: c.Epoch, OwnerSince: c.OwnerSince, LeaseExpiresAt: c.LeaseExpiresAt,
		InFlight: c.InFlight, InFlightSince: c.InFlightSince, RecordsHandled: c.RecordsHandled, Throughput: c.Throughput,
		ParkedKeys: c.ParkedKeys, ParkedRecords: c.ParkedRecords, ParkedSince: c.ParkedSince, OldestParked: c.OldestParked,
		LateRows: c.LateRows, LateAt: c.LateAt}
	if in.Locked {
		in.Holder = c.Owner
	}
	return in
}

// lookBehind looks whether any committed row of the source is after the position (horizon or not, as
// Measure counts them) into in.CaughtUp, in a savepoint of tx, so that a failure (a source dropped or not
// readable) leaves tx usable.
func (in *Info) lookBehind(ctx context.Context, tx pgx.Tx) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("look behind %q: %w", in.Process, err)
	}
	defer sp.Rollback(ctx) //nolint:errcheck // read-only
	t, err := source.Inspect(ctx, sp, in.Source)
	if err != nil {
		return err
	}
	exists, args := t.ExistsAfter(in.Position, 1)
	var behind bool
	if err := sp.QueryRow(ctx, "SELECT "+exists, args...).Scan(&behind); err != nil {
		return fmt.Errorf("look for rows after the position of %q in %s: %w", in.Process, t.Qualified, err)
	}
	in.CaughtUp = !behind
	return nil
}

// holderOnSession checks the owner that said it holds the process's advisory lock on its session (see
// store.SessionHolder): no holder means that session has ended, whatever the lease says (a standby
// takes over at once).
func holderOnSession(ctx context.Context, tx pgx.Tx, in *Info) error {
	pid, held, err := store.SessionHolder(ctx, tx, in.Process)
	switch {
	case err != nil:
		return fmt.Errorf("find owner of cursor %q: %w", in.Process, err)
	case !held:
		in.Locked, in.Holder = false, ""
	default:
		in.HolderPID = int(pid)
	}
	return nil
}

// Lag is how far a process is behind its source.
type Lag struct {
	// Rows counts the rows after the position, up to 1,000,000, so that status stays cheap on a stream
	// far behind; Capped says the count stopped there.
	Rows   int64
	Capped bool
	// Oldest is the created_at of the first row after the position; zero when there is none.
	Oldest time.Time
	// Now is the database's clock when Lag was measured, to age Oldest against.
	Now time.Time
}

// behind measures the rows of the process's source after its position (committed rows, horizon or not).
// It fails with errNeverRan for a process that has not run yet.
func behind(ctx context.Context, db DB, in Info) (Lag, error) {
	if in.Source.Table == "" {
		return Lag{}, fmt.Errorf("measure lag of %q: %w, so its source is unknown", in.Process, errNeverRan)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Lag{}, fmt.Errorf("measure lag of %q: %w", in.Process, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	t, err := source.Inspect(ctx, tx, in.Source)
	if err != nil {
		return Lag{}, err
	}
	lag, err := source.AdminOf(t).Behind(ctx, tx, in.Position)
	return Lag(lag), err
}

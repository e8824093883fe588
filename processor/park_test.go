package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/internal/harness/testrun"
	"github.com/inorder-dev/inorder/processor"
)

// insertKeys adds perKey events for each of keys, interleaved (round by round), in one statement, and
// returns their ids by key, in order.
func (b *bundle) insertKeys(t *testing.T, keys []string, perKey int) map[string][]int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `
		INSERT INTO events (aggregate_id, seq)
		SELECT k, g FROM generate_series(1, $2) g, unnest($1::text[]) WITH ORDINALITY AS u(k, o) ORDER BY g, o
		RETURNING aggregate_id, id`, keys, perKey)
	require.NoError(t, err)
	byKey := map[string][]int64{}
	for rows.Next() {
		var k string
		var id int64
		require.NoError(t, rows.Scan(&k, &id))
		byKey[k] = append(byKey[k], id)
	}
	require.NoError(t, rows.Err())
	return byKey
}

// parkedIDs reads the records parked in the process's stream for key, in order.
func (b *bundle) parkedIDs(t *testing.T, key string) []int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT record_id::bigint FROM inorder.parked
		WHERE process_name = $1 AND key = $2 ORDER BY seq`, b.cfg.Process, key)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

// parkKey runs a parking processor over perKey records of each of keys, the sink refusing record index
// of key, and waits until the key's records from there on are parked. It returns the ids by key.
func (b *bundle) parkKey(t *testing.T, keys []string, perKey int, key string, index int) (map[string][]int64, func() error) {
	t.Helper()
	b.cfg.OnHalt = processor.OnHaltPark
	ids := b.insertKeys(t, keys, perKey)
	b.h.setFail(ids[key][index], handlers.Permanent(errors.New("400 Bad Request")))
	stop := start(t, b.cfg)
	waitFor(t, "the key parked", func() bool { return len(b.parkedIDs(t, key)) == perKey-index })
	return ids, stop
}

// byKeyOf groups what the collector received by key, in the order received.
func byKeyOf(recs []handlers.Record[event]) map[string][]int64 {
	out := map[string][]int64{}
	for _, r := range recs {
		out[r.Value.AggregateID] = append(out[r.Value.AggregateID], r.Value.ID)
	}
	return out
}

func (c *collector) callsOf(id int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

var ops = cursor.ActionOpts{Actor: "test", Reason: "the sink accepts the key again"}

// TestARefusedKeyParksAndTheOtherKeysGoOn: with OnHaltPark, a key whose record the sink refuses is parked
// at its first refusal; the other keys are delivered in full, in order, and no later record of the parked
// key reaches the handler. A redrive then delivers every parked record once, in order, and unparks the key.
func TestARefusedKeyParksAndTheOtherKeysGoOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxInFlight int
		checkpoint  processor.Checkpoint
	}{
		{name: "one at a time", maxInFlight: 1, checkpoint: processor.CheckpointRecord},
		{name: "window", maxInFlight: 8, checkpoint: processor.CheckpointRecord},
		{name: "window, batch checkpoints", maxInFlight: 8, checkpoint: processor.CheckpointBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.cfg.OnHalt = processor.OnHaltPark
			b.cfg.MaxInFlight, b.cfg.Checkpoint, b.cfg.BatchSize = tc.maxInFlight, tc.checkpoint, 25
			keys := []string{"k0", "k1", "k2", "k3", "k4"}
			ids := b.insertKeys(t, keys, 20)
			refused := ids["k1"][4:]
			for _, id := range refused {
				b.h.setFail(id, handlers.Permanent(errors.New("400 Bad Request: account closed")))
			}
			start(t, b.cfg)

			waitFor(t, "every record of the other keys", func() bool { return b.h.count() == 4*20+4 })
			got := byKeyOf(b.h.records())
			for _, k := range keys {
				if k == "k1" {
					require.Equal(t, ids[k][:4], got[k], "the parked key's records before its refusal")
					continue
				}
				require.Equal(t, ids[k], got[k], "key %s: every record once, in order", k)
			}
			waitFor(t, "the key's records parked", func() bool { return len(b.parkedIDs(t, "k1")) == len(refused) })
			require.Equal(t, refused, b.parkedIDs(t, "k1"))
			require.Equal(t, 1, b.h.callsOf(refused[0]), "the refused record was tried once")
			for _, id := range refused[1:] {
				require.Zero(t, b.h.callsOf(id), "record %d of the parked key reached the handler", id)
			}
			keysParked, err := cursor.Parked(context.Background(), b.db.Pool, b.cfg.Process)
			require.NoError(t, err)
			require.Len(t, keysParked, 1)
			k := keysParked[0]
			require.Equal(t, "k1", k.Key)
			require.Equal(t, len(refused), k.Records)
			require.Equal(t, idText(refused[0]), k.Head)
			require.Contains(t, k.Error, "account closed")
			require.True(t, k.Permanent)
			require.Equal(t, 1, k.Attempts)
			procs, err := cursor.Read(context.Background(), b.db.Pool, cursor.ReadOpts{Process: b.cfg.Process})
			require.NoError(t, err)
			require.Nil(t, procs[0].Info.Halt, "the stream is not halted")
			require.Equal(t, 1, procs[0].Info.ParkedKeys)
			require.Equal(t, len(refused), procs[0].Info.ParkedRecords)

			for _, id := range refused {
				b.h.setFail(id, nil)
			}
			_, err = cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "k1", ActionOpts: ops})
			require.NoError(t, err)
			waitFor(t, "the parked key delivered", func() bool { return b.h.count() == 5*20 })
			got = byKeyOf(b.h.records())
			require.Equal(t, ids["k1"], got["k1"], "the parked key: every record once, in order")
			waitFor(t, "nothing parked", func() bool { return len(b.parkedIDs(t, "k1")) == 0 })

			// The key is unparked: its new records go straight through.
			more := b.insertKeys(t, []string{"k1"}, 2)
			waitFor(t, "the key's new records", func() bool { return b.h.count() == 5*20+2 })
			require.Equal(t, append(ids["k1"], more["k1"]...), byKeyOf(b.h.records())["k1"])
		})
	}
}

// TestAKeyFailingLongerThanHaltAfterParks: errors that may pass retry the record, every key waiting, until
// it has failed for HaltAfter; then the key parks and the others go on.
func TestAKeyFailingLongerThanHaltAfterParks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.OnHalt = processor.OnHaltPark
	b.cfg.HaltAfter = 300 * time.Millisecond
	ids := b.insertKeys(t, []string{"a", "b"}, 5)
	b.h.setFail(ids["a"][1], errors.New("503 Service Unavailable"))
	start(t, b.cfg)

	waitFor(t, "the key parked", func() bool { return len(b.parkedIDs(t, "a")) == 4 })
	waitFor(t, "the other key delivered", func() bool { return len(byKeyOf(b.h.records())["b"]) == 5 })
	require.Equal(t, ids["b"], byKeyOf(b.h.records())["b"])
	require.Greater(t, b.h.callsOf(ids["a"][1]), 1, "it was retried before it parked")
	keys, err := cursor.Parked(context.Background(), b.db.Pool, b.cfg.Process)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.False(t, keys[0].Permanent)
	require.Contains(t, keys[0].Error, "503")
}

// TestAKeylessRecordStillHalts: a record without a key cannot be parked; it halts the stream.
func TestAKeylessRecordStillHalts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.OnHalt = processor.OnHaltPark
	b.db.Exec(t, "ALTER TABLE events ADD COLUMN k text")
	b.cfg.Source.KeyColumn = "k" // NULL for every row: no record has a key
	ids := b.insert(t, 3)
	b.h.setFail(ids[1], handlers.Permanent(errors.New("400 Bad Request")))
	start(t, b.cfg)
	waitFor(t, "the halt", func() bool { h := b.halt(t); return h != nil && !h.Retrying() })
	require.Equal(t, idText(ids[1]), b.halt(t).RecordID)
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM inorder.parked").Scan(&n))
	require.Zero(t, n)
}

// TestSkippingAParkedRecordRedrivesTheRest: skip drops the key's first parked record (audited) and the
// rest of the key is delivered in order.
func TestSkippingAParkedRecordRedrivesTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, _ := b.parkKey(t, []string{"a", "b"}, 4, "a", 1)
	bad := ids["a"][1]

	_, err := cursor.Skip(context.Background(), b.db.Pool, b.cfg.Process, idText(ids["a"][2]), ops)
	require.ErrorIs(t, err, cursor.ErrNotParked, "a record behind the first is not skipped")
	e, err := cursor.Skip(context.Background(), b.db.Pool, b.cfg.Process, idText(bad), ops)
	require.NoError(t, err)
	require.Equal(t, idText(bad), e.RecordID)
	require.Equal(t, []cursor.ParkedCount{{Key: "a", Records: 2}}, e.Detail.Keys)
	waitFor(t, "the rest of the key", func() bool { return len(byKeyOf(b.h.records())["a"]) == 3 })
	require.Equal(t, []int64{ids["a"][0], ids["a"][2], ids["a"][3]}, byKeyOf(b.h.records())["a"])
	waitFor(t, "nothing parked", func() bool { return len(b.parkedIDs(t, "a")) == 0 }) // removed after the handler returned
	require.Equal(t, 1, b.h.callsOf(bad), "the skipped record was not delivered again")
}

// TestAParkedKeySurvivesARestart: a new instance finds the key parked, and parks the key's new records
// behind it.
func TestAParkedKeySurvivesARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, stop := b.parkKey(t, []string{"a", "b"}, 3, "a", 0)
	waitFor(t, "the other key", func() bool { return len(byKeyOf(b.h.records())["b"]) == 3 })
	require.NoError(t, stop())

	b.h.setFail(ids["a"][0], nil) // the sink would accept it now: only a redrive may deliver it
	start(t, b.cfg)
	more := b.insertKeys(t, []string{"a", "b"}, 2)
	waitFor(t, "the other key's new records", func() bool { return len(byKeyOf(b.h.records())["b"]) == 5 })
	waitFor(t, "the key's new records parked", func() bool { return len(b.parkedIDs(t, "a")) == 5 })
	require.Empty(t, byKeyOf(b.h.records())["a"], "nothing of the parked key went through")
	_, err := cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{All: true, ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the key redriven", func() bool { return len(byKeyOf(b.h.records())["a"]) == 5 })
	require.Equal(t, append(ids["a"], more["a"]...), byKeyOf(b.h.records())["a"])
}

// TestATransactionalHandlerParks: the failed record's savepoint is rolled back, nothing of it written;
// its redrive writes it with the removal of the parked row.
func TestATransactionalHandlerParks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.db.Exec(t, "CREATE TABLE seen (id bigint PRIMARY KEY, key text NOT NULL)")
	b.cfg.OnHalt = processor.OnHaltPark
	var mu sync.Mutex
	refuse := map[int64]bool{}
	b.cfg.Handler = nil
	b.cfg.TxHandler = handlers.TxHandlerFunc[event](func(ctx context.Context, tx pgx.Tx, rec *handlers.Record[event]) error {
		if _, err := tx.Exec(ctx, "INSERT INTO seen VALUES ($1, $2)", rec.Value.ID, rec.Value.AggregateID); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if refuse[rec.Value.ID] {
			return handlers.Permanent(fmt.Errorf("record %d refused", rec.Value.ID))
		}
		return nil
	})
	ids := b.insertKeys(t, []string{"a", "b"}, 3)
	mu.Lock()
	refuse[ids["a"][1]] = true
	mu.Unlock()
	start(t, b.cfg)
	seen := func() []int64 {
		rows, err := b.db.Pool.Query(context.Background(), "SELECT id FROM seen ORDER BY id")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return out
	}
	waitFor(t, "the other key written", func() bool { return len(seen()) == 4 })
	require.Equal(t, []int64{ids["a"][0], ids["b"][0], ids["b"][1], ids["b"][2]}, seen(),
		"nothing of the refused record, nor of the key after it")
	require.Equal(t, ids["a"][1:], b.parkedIDs(t, "a"))

	mu.Lock()
	refuse[ids["a"][1]] = false
	mu.Unlock()
	_, err := cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "a", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the key written", func() bool { return len(seen()) == 6 })
	require.Empty(t, b.parkedIDs(t, "a"))
}

// TestARedriveThatFailsAgainKeepsTheKeyParked: the first record still refused: the key stays parked
// with the new error and its attempts counted, and nothing behind it is delivered.
func TestARedriveThatFailsAgainKeepsTheKeyParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.OnHalt = processor.OnHaltPark
	ids := b.insertKeys(t, []string{"a"}, 3)
	b.h.setFail(ids["a"][0], handlers.Permanent(errors.New("400 first")))
	start(t, b.cfg)
	waitFor(t, "the key parked", func() bool { return len(b.parkedIDs(t, "a")) == 3 })
	b.h.setFail(ids["a"][0], handlers.Permanent(errors.New("422 still refused")))
	_, err := cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "a", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the redrive tried", func() bool {
		keys, err := cursor.Parked(context.Background(), b.db.Pool, b.cfg.Process)
		require.NoError(t, err)
		return len(keys) == 1 && keys[0].Attempts == 2 && !keys[0].RedriveRequested
	})
	keys, err := cursor.Parked(context.Background(), b.db.Pool, b.cfg.Process)
	require.NoError(t, err)
	require.Contains(t, keys[0].Error, "422 still refused")
	require.Equal(t, 3, keys[0].Records)
	require.Empty(t, b.h.ids())
	_, err = cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "zzz", ActionOpts: ops})
	require.ErrorIs(t, err, cursor.ErrNotParked)
}

// TestPruneKeepsParkedRows: a prune beside a parked key deletes what every process passed up to the first
// parked record and keeps that record's row and every row after it; its result names the parked record
// as what holds it back. The key's redrive then finds every row.
func TestPruneKeepsParkedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, _ := b.parkKey(t, []string{"a", "b"}, 5, "a", 2)
	head := ids["a"][2]
	waitFor(t, "the other key", func() bool { return len(byKeyOf(b.h.records())["b"]) == 5 })
	waitFor(t, "the position at the last record", func() bool {
		_, id := b.position(t, b.cfg.Process)
		return id == idText(ids["b"][4])
	})

	res, err := cursor.Prune(context.Background(), b.db.Pool, cursor.PruneOpts{ActionOpts: ops, Table: "events",
		Before: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NotNil(t, res.Limit)
	require.Contains(t, res.Limit.Note, "parked record "+idText(head))
	rows, err := b.db.Pool.Query(context.Background(), "SELECT id FROM events ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, head, left[0], "every row before the first parked record went, and it stayed")
	require.Len(t, left, 10-4, "the rows from the parked record on stayed") // a0 b0 a1 b1 went

	b.h.setFail(head, nil)
	_, err = cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "a", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the key redriven", func() bool { return len(byKeyOf(b.h.records())["a"]) == 5 })
	require.Equal(t, ids["a"], byKeyOf(b.h.records())["a"])
}

// TestRepartitionAndForgetRefuseWhileKeysAreParked: a key's parked records belong to the stream that
// parked them; neither a repartition nor a forget may drop them.
func TestRepartitionAndForgetRefuseWhileKeysAreParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.OnHalt = processor.OnHaltPark
	ids := b.insertKeys(t, []string{"a"}, 2)
	b.h.setFail(ids["a"][0], handlers.Permanent(errors.New("400 Bad Request")))
	stop := start(t, b.cfg)
	waitFor(t, "the key parked", func() bool { return len(b.parkedIDs(t, "a")) == 2 })
	waitFor(t, "the position past the key", func() bool { _, id := b.position(t, b.cfg.Process); return id == idText(ids["a"][1]) })
	require.NoError(t, stop())

	_, err := cursor.Repartition(context.Background(), b.db.Pool, b.cfg.Process, 2, ops)
	require.ErrorIs(t, err, cursor.ErrParked)
	require.Contains(t, err.Error(), "1 keys parked (2 records)")
	_, err = cursor.Forget(context.Background(), b.db.Pool, b.cfg.Process, ops)
	require.ErrorIs(t, err, cursor.ErrParked)
	require.Len(t, b.parkedIDs(t, "a"), 2)
}

// TestNoNewRecordOvertakesAParkedOneDuringARedrive: while a parked key is redriven (its records slow at
// the sink), writers keep adding records of that key. Every record of the key reaches the handler once,
// and in (created_at, id) order: none of the new ones before a parked one.
func TestNoNewRecordOvertakesAParkedOneDuringARedrive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.OnHalt = processor.OnHaltPark
	b.cfg.BatchSize = 7
	// The handler is slow for the key once the redrive begins, so that writers get in between its records.
	var slow atomic.Bool
	b.cfg.Handler = handlers.HandlerFunc[event](func(ctx context.Context, rec *handlers.Record[event]) error {
		if slow.Load() && rec.Key == "a" {
			time.Sleep(2 * time.Millisecond)
		}
		return b.h.Handle(ctx, rec)
	})
	ids := b.insertKeys(t, []string{"a", "b"}, 30)
	b.h.setFail(ids["a"][0], handlers.Permanent(errors.New("400 Bad Request")))
	start(t, b.cfg)
	waitFor(t, "the key parked", func() bool { return len(b.parkedIDs(t, "a")) == 30 })
	waitFor(t, "the other key", func() bool { return len(byKeyOf(b.h.records())["b"]) == 30 })
	b.h.setFail(ids["a"][0], nil)
	slow.Store(true)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var added sync.Map
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				// Each insert runs to its end (not cut off by ctx, which could leave it committing after
				// the test has counted the rows); the loop stops between inserts.
				var id int64
				if err := b.db.Pool.QueryRow(context.Background(), "INSERT INTO events (aggregate_id, seq) VALUES ('a', $1) RETURNING id",
					1000*w+i).Scan(&id); err != nil {
					t.Error(err)
					return
				}
				added.Store(id, true)
				time.Sleep(time.Millisecond)
			}
		})
	}
	_, err := cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "a", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the parked records redriven", func() bool { return len(b.parkedIDs(t, "a")) == 0 })
	count := func() (n int) { added.Range(func(any, any) bool { n++; return true }); return n }
	unparked := count()
	waitFor(t, "records added after the key was unparked", func() bool { return count() >= unparked+10 })
	cancel()
	wg.Wait()
	var want []int64
	rows, err := b.db.Pool.Query(context.Background(), "SELECT id FROM events WHERE aggregate_id = 'a' ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	want, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Greater(t, unparked, 10, "writers added records during the redrive")
	waitFor(t, "every record of the key", func() bool { return len(byKeyOf(b.h.records())["a"]) >= len(want) })
	require.Equal(t, want, byKeyOf(b.h.records())["a"], "the key's records once each, in order")
}

// TestAPartitionParksAKey: in a partitioned process the key parks in its partition's stream; the process's
// parked keys list it, and a redrive named by the process delivers it.
func TestAPartitionParksAKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.partitionIndex(t, 3)
	b.cfg.OnHalt = processor.OnHaltPark
	b.cfg.Process = "split"
	keys := []string{"a", "b", "c", "d", "e", "f"}
	ids := b.insertKeys(t, keys, 10)
	b.h.setFail(ids["c"][3], handlers.Permanent(errors.New("400 Bad Request")))
	p, err := processor.NewPartitioned(b.cfg, processor.PartitionOpts{Partitions: 3})
	require.NoError(t, err)
	testrun.Start(t, p.Run)

	waitFor(t, "the other keys", func() bool { return b.h.count() == 5*10+3 })
	var parked []cursor.ParkedKey
	waitFor(t, "the key parked", func() bool {
		parked, err = cursor.Parked(context.Background(), b.db.Pool, "split")
		require.NoError(t, err)
		return len(parked) == 1 && parked[0].Records == 7
	})
	require.Equal(t, "c", parked[0].Key)
	require.Contains(t, parked[0].Stream, "split#")
	b.h.setFail(ids["c"][3], nil)
	_, err = cursor.Redrive(context.Background(), b.db.Pool, "split", cursor.RedriveOpts{Key: "c", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the key redriven", func() bool { return len(byKeyOf(b.h.records())["c"]) == 10 })
	got := byKeyOf(b.h.records())
	for _, k := range keys {
		require.Equal(t, ids[k], got[k], "key %s", k)
	}
}

// TestParkedRecordsKeepTheStreamsOrderOfIDs: records that tie on created_at are ordered by id as the
// table orders it (9 before 10), not as text; the redrive keeps that order.
func TestParkedRecordsKeepTheStreamsOrderOfIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.OnHalt = processor.OnHaltPark
	rows, err := b.db.Pool.Query(context.Background(), `INSERT INTO events (aggregate_id, seq, created_at)
		SELECT 'a', g, now() - interval '1 minute' FROM generate_series(1, 12) g RETURNING id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	b.h.setFail(ids[0], handlers.Permanent(errors.New("400 Bad Request")))
	start(t, b.cfg)
	waitFor(t, "the key parked", func() bool { return len(b.parkedIDs(t, "a")) == 12 })
	keys, err := cursor.Parked(context.Background(), b.db.Pool, b.cfg.Process)
	require.NoError(t, err)
	require.Equal(t, idText(ids[0]), keys[0].Head)

	b.h.setFail(ids[0], nil)
	_, err = cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "a", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the key redriven", func() bool { return b.h.count() == 12 })
	require.Equal(t, ids, b.h.ids())
}

// TestAnInstanceThatDoesNotParkKeepsParkedKeysParked: an instance started without OnHaltPark (a rolling
// deploy that lost the flag) honours the keys parked before: their new records park behind them, and a
// redrive delivers them; a new failure halts the stream.
func TestAnInstanceThatDoesNotParkKeepsParkedKeysParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids, stop := b.parkKey(t, []string{"a", "b"}, 2, "a", 0)
	waitFor(t, "the other key", func() bool { return b.h.count() == 2 })
	require.NoError(t, stop())

	b.h.setFail(ids["a"][0], nil)
	b.cfg.OnHalt = ""
	start(t, b.cfg)
	more := b.insertKeys(t, []string{"a", "b"}, 2)
	waitFor(t, "the other key's new records", func() bool { return len(byKeyOf(b.h.records())["b"]) == 4 })
	waitFor(t, "the key's new records parked", func() bool { return len(b.parkedIDs(t, "a")) == 4 })
	require.Empty(t, byKeyOf(b.h.records())["a"])
	_, err := cursor.Redrive(context.Background(), b.db.Pool, b.cfg.Process, cursor.RedriveOpts{Key: "a", ActionOpts: ops})
	require.NoError(t, err)
	waitFor(t, "the key redriven", func() bool { return len(byKeyOf(b.h.records())["a"]) == 4 })
	require.Equal(t, append(ids["a"], more["a"]...), byKeyOf(b.h.records())["a"])
}

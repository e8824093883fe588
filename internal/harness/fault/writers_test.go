package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// aggregates is how many aggregates the writers spread over: few enough that they contend on the row
// locks, so that a late commit makes others wait.
const aggregates = 16

// writerStats counts what the writers did.
type writerStats struct {
	Commits, Rollbacks, Late, Failed, Unknown, UnknownCommitted, ConnectErrors int
	// Reused counts ids that a transaction which never committed had and a later one committed: after a
	// crash of the server, a sequence starts again from its last WAL record that reached the disk, so the
	// ids handed out to transactions the crash took away are handed out again.
	Reused int
}

// writers run transactions against the events table until stopped, and keep the exact set of committed
// rows, and of rows that were inserted and never committed.
type writers struct {
	t      *testing.T
	url    string
	stopCh chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu        sync.Mutex
	committed map[int64]bool
	aborted   map[int64]bool
	stats     writerStats
}

// startWriters starts n writer goroutines; the test's cleanup stops them.
func startWriters(t *testing.T, url string, n int, seed uint64) *writers {
	ws := &writers{t: t, url: url, stopCh: make(chan struct{}), committed: map[int64]bool{}, aborted: map[int64]bool{}}
	for i := range n {
		ws.wg.Add(1)
		go ws.run(rand.New(rand.NewPCG(seed, uint64(i)+1)))
	}
	t.Cleanup(ws.stop)
	return ws
}

// stop asks every writer to stop after its transaction in flight and waits for them.
func (ws *writers) stop() {
	ws.once.Do(func() { close(ws.stopCh) })
	ws.wg.Wait()
}

func (ws *writers) stopped() bool {
	select {
	case <-ws.stopCh:
		return true
	default:
		return false
	}
}

// add counts rows the scenario committed itself among the committed ones.
func (ws *writers) add(ids []int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, id := range ids {
		ws.committed[id] = true
	}
}

// snapshot returns the committed rows, the rows inserted and never committed, and the counts. An id both
// committed and aborted was given again after a crash (see writerStats.Reused): the row in the table is
// the committed one, and the id counts as committed only.
func (ws *writers) snapshot() (committed, aborted map[int64]bool, stats writerStats) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	committed, aborted, stats = map[int64]bool{}, map[int64]bool{}, ws.stats
	for id := range ws.committed {
		committed[id] = true
	}
	for id := range ws.aborted {
		if committed[id] {
			stats.Reused++
			continue
		}
		aborted[id] = true
	}
	return committed, aborted, stats
}

func (ws *writers) run(rng *rand.Rand) {
	defer ws.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for !ws.stopped() {
		if conn == nil {
			if conn = ws.connect(); conn == nil {
				return
			}
		}
		conn = ws.txn(conn, rng)
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
	}
}

// connect opens a connection, retrying while the server is away; nil once stopped.
func (ws *writers) connect() *pgx.Conn {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, ws.url)
		cancel()
		if err == nil {
			return conn
		}
		ws.mu.Lock()
		ws.stats.ConnectErrors++
		ws.mu.Unlock()
		if ws.stopped() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// txn runs one writer transaction and returns the connection to go on with (nil after an error: the next
// transaction reconnects). The statements do not use the stop signal as their context: cancelling a
// COMMIT in flight would leave its outcome unknown for no reason.
func (ws *writers) txn(conn *pgx.Conn, rng *rand.Rand) *pgx.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agg := fmt.Sprintf("agg-%d", rng.IntN(aggregates))
	k := 1 + rng.IntN(3)
	late := rng.IntN(5) == 0
	rollback := rng.IntN(10) == 0
	var ids []int64
	failed := func() *pgx.Conn {
		ws.mu.Lock()
		for _, id := range ids {
			ws.aborted[id] = true
		}
		ws.stats.Failed++
		ws.mu.Unlock()
		_ = conn.Close(context.Background())
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return failed()
	}
	var seq int
	if err := tx.QueryRow(ctx, "SELECT seq FROM aggregates WHERE id = $1 FOR UPDATE", agg).Scan(&seq); err != nil {
		return failed()
	}
	for i := 1; i <= k; i++ {
		var id int64
		if err := tx.QueryRow(ctx, "INSERT INTO events (aggregate_id, seq) VALUES ($1, $2) RETURNING id",
			agg, seq+i).Scan(&id); err != nil {
			return failed()
		}
		ids = append(ids, id)
	}
	if _, err := tx.Exec(ctx, "UPDATE aggregates SET seq = $2 WHERE id = $1", agg, seq+k); err != nil {
		return failed()
	}
	if late {
		time.Sleep(time.Duration(50+rng.IntN(451)) * time.Millisecond)
	}
	if rollback {
		if err := tx.Rollback(ctx); err != nil {
			return failed()
		}
		ws.mu.Lock()
		for _, id := range ids {
			ws.aborted[id] = true
		}
		ws.stats.Rollbacks++
		ws.mu.Unlock()
		return conn
	}
	if err := tx.Commit(ctx); err != nil {
		// The COMMIT may or may not have happened (the server can end the session right after it): ask.
		_ = conn.Close(context.Background())
		committed := ws.resolve(ids, agg, seq)
		ws.mu.Lock()
		for _, id := range ids {
			if committed {
				ws.committed[id] = true
			} else {
				ws.aborted[id] = true
			}
		}
		ws.stats.Unknown++
		if committed {
			ws.stats.UnknownCommitted++
		}
		ws.mu.Unlock()
		return nil
	}
	ws.mu.Lock()
	for _, id := range ids {
		ws.committed[id] = true
	}
	ws.stats.Commits++
	if late {
		ws.stats.Late++
	}
	ws.mu.Unlock()
	return conn
}

// resolve finds out whether the transaction that inserted ids (for aggregate agg, sequence numbers after
// seq) committed, once the server answers again. It looks for the rows by their content too: after a
// failover the promoted server may give the same ids to other rows.
func (ws *writers) resolve(ids []int64, agg string, seq int) bool {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		conn, err := pgx.Connect(ctx, ws.url)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT count(*) FROM events e, unnest($1::bigint[]) WITH ORDINALITY AS u(id, k)
				WHERE e.id = u.id AND e.aggregate_id = $2 AND e.seq = $3 + u.k`, ids, agg, seq).Scan(&n)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			if n != 0 && n != len(ids) {
				// Not a transaction half committed: its ids were handed out again after the crash (see
				// writerStats.Reused), and another transaction on the same aggregate, which starts from the
				// same sequence number, committed some of them with the same content. This one did not
				// commit; the rows found are the other's.
				ws.t.Logf("writers: %d of the %d rows %v of a transaction the crash took away were written again "+
					"by another with the same ids", n, len(ids), ids)
			}
			return n == len(ids)
		}
		if time.Now().After(deadline) {
			ws.t.Errorf("writers: could not find out whether rows %v committed: %v", ids, err)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

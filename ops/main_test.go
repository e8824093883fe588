package ops_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/inordertype"
	"github.com/inorder-dev/inorder/internal/harness/pgtest"
	"github.com/inorder-dev/inorder/processor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type row struct {
	ID int64 `db:"id"`
}

// setup gives the test a database with a table jobs of five rows and the config of a processor "jobs"
// reading it, without a handler.
func setup(t *testing.T) (*pgtest.DB, processor.Config[row]) {
	t.Helper()
	db := pgtest.New(t)
	db.Exec(t, `CREATE TABLE jobs (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON jobs (created_at, id)`)
	pgtest.AddClock(t, db, "jobs")
	db.Exec(t, "INSERT INTO jobs SELECT FROM generate_series(1, 5)")
	cc, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	return db, processor.Config[row]{
		StartFrom: inordertype.StartFromBeginning,
		Process:   "jobs", ClientConfig: processor.ClientConfig{ConnConfig: cc}, Source: inordertype.Source{Table: "jobs", Columns: []string{"id"}},
		PollInterval: 20 * time.Millisecond,
	}
}

package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder-dev/inorder/migrations"
)

// SchemaError says that the database's inorder schema is older than this binary needs: a newer inorder
// started before `inorder migrate` ran. Migrations are additive, so older instances keep running while the
// new schema is applied; a newer instance waits for it.
type SchemaError struct {
	// Have is the newest migration the database has (0 when it has none, -1 when it is older than 13
	// and the role may not read which); Need is the newest this binary knows.
	Have, Need int
}

func (e *SchemaError) Error() string {
	if e.Have < 0 {
		return fmt.Sprintf("the schema is older than version 13, this inorder needs %d: run `inorder migrate` "+
			"(safe while older instances run)", e.Need)
	}
	if e.Have == 0 {
		return "inorder's tables are not in this database: run inorder migrate first"
	}
	return fmt.Sprintf("the schema is at version %d, this inorder needs %d: run `inorder migrate` (safe while older instances run)",
		e.Have, e.Need)
}

// CheckSchema returns a *SchemaError when the database's inorder schema is older than this binary's newest
// migration. A newer schema is fine: instances of the version before keep running while `inorder migrate`
// applies the next, so every migration leaves what they use in place.
func CheckSchema(ctx context.Context, q Querier) error {
	all := migrations.All()
	need := all[len(all)-1].Version
	var have int
	err := q.QueryRow(ctx, "SELECT inorder.schema_version()").Scan(&have)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42883" { // no such function: a schema from before version 13
		err = q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM inorder.schema_migration").Scan(&have)
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // a role that may not read it
			return &SchemaError{Have: -1, Need: need}
		}
	}
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") { // no table, no schema
		return &SchemaError{Need: need}
	}
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if have < need {
		return &SchemaError{Have: have, Need: need}
	}
	return nil
}

// checkpointGrants is what a role that runs processors needs on the checkpoint log (migration 13 grants it
// to every role that could update cursor rows before it; a role granted by hand since may lack it).
const checkpointGrants = "GRANT SELECT, INSERT, TRUNCATE ON inorder.checkpoint, inorder.checkpoint_0, " +
	"inorder.checkpoint_1, inorder.checkpoint_2 TO %[1]s; GRANT USAGE ON SEQUENCE inorder.checkpoint_seq TO %[1]s; " +
	"GRANT SELECT ON inorder.position TO %[1]s; GRANT SELECT, INSERT, UPDATE, DELETE ON inorder.source_state TO %[1]s"

// checkPrivileges refuses, in one line naming the grants, a role that may not record positions.
func checkPrivileges(ctx context.Context, q Querier) error {
	var may bool
	var role string
	if err := q.QueryRow(ctx, `SELECT current_user,
		has_table_privilege('inorder.checkpoint', 'SELECT, INSERT')
		AND has_table_privilege('inorder.checkpoint_0', 'SELECT, INSERT, TRUNCATE')
		AND has_table_privilege('inorder.checkpoint_1', 'SELECT, INSERT, TRUNCATE')
		AND has_table_privilege('inorder.checkpoint_2', 'SELECT, INSERT, TRUNCATE')
		AND has_sequence_privilege('inorder.checkpoint_seq', 'USAGE')
		AND has_table_privilege('inorder.position', 'SELECT')
		AND has_table_privilege('inorder.source_state', 'SELECT, INSERT, UPDATE, DELETE')`).Scan(&role, &may); err != nil {
		return fmt.Errorf("check the privileges on inorder's checkpoint tables: %w", err)
	}
	if !may {
		return fmt.Errorf("role %s may not record positions in inorder's checkpoint tables: %s", role,
			fmt.Sprintf(checkpointGrants, pgx.Identifier{role}.Sanitize()))
	}
	return nil
}

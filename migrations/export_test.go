package migrations

import "context"

// MigrateThese is MigrateWith with the migrations given rather than All, so that a test can have one
// pending on a database that has every migration of the binary.
func MigrateThese(ctx context.Context, db DB, these []Migration, opts Options) (Applied, error) {
	return migrate(ctx, db, these, opts)
}

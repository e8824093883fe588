package bench

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/internal/store"
)

// rotateStep takes one step of the checkpoint tables' rotation on conn, as a processor's prober does.
func rotateStep(ctx context.Context, conn *pgx.Conn) error {
	_, err := store.RotateCheckpoints(ctx, conn)
	return err
}

package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/console"
)

// mount serves the console under /inorder/ on a service's own admin mux, and measures the lag for its
// charts until ctx ends.
func mount(ctx context.Context, mux *http.ServeMux, pool *pgxpool.Pool) error {
	con, err := console.New(console.Config{Pool: pool, Token: os.Getenv("INORDER_CONSOLE_TOKEN")})
	if err != nil {
		return err
	}
	mux.Handle("/inorder/", http.StripPrefix("/inorder", con))
	go con.Run(ctx) // until ctx ends
	return nil
}

// Example_mount mounts the console on an admin server. Without a token it answers loopback clients only;
// a request from elsewhere is refused before anything is read.
func Example_mount() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/app") // connects lazily
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mux := http.NewServeMux()
	if err := mount(ctx, mux, pool); err != nil {
		panic(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/inorder/", nil)
	req.RemoteAddr = "203.0.113.9:41000"
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output: 403
}

package cursor_test

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/cursor"
)

// userOf stands for the service's own authentication.
func userOf(r *http.Request) string { return r.Header.Get("X-User") }

// Example_adminEndpoint is a service's own admin endpoint for skipping the record a stream is halted on,
// built on the actions API: the rules (only the halted record, a reason, the audit entry) are the
// library's. The README shows this body; TestREADMESnippetsCompile keeps the two identical.
func Example_adminEndpoint() {
	var pool *pgxpool.Pool // the service's own pool
	mux := http.NewServeMux()

	mux.HandleFunc("POST /admin/processes/{name}/skip", func(w http.ResponseWriter, r *http.Request) {
		entry, err := cursor.Skip(r.Context(), pool, r.PathValue("name"), r.FormValue("record"),
			cursor.ActionOpts{Actor: userOf(r), Reason: r.FormValue("reason")})
		switch {
		case errors.Is(err, cursor.ErrUnknownProcess), errors.Is(err, cursor.ErrNoRecord):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, cursor.ErrNotHalted), errors.Is(err, cursor.ErrWrongRecord), errors.Is(err, cursor.ErrBusy):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			_ = json.NewEncoder(w).Encode(entry) // who, why, when, and the position before and after
		}
	})
	mux.HandleFunc("GET /admin/processes", func(w http.ResponseWriter, r *http.Request) {
		procs, err := cursor.Read(r.Context(), pool, cursor.ReadOpts{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(procs) // each with its streams: position, halt (permanent or retryable, status), hold, owner
	})
}

// ExampleRedrive is an admin endpoint that lists a process's parked keys and redrives one, for a process
// run with processor.OnHaltPark: the owning processor delivers the key's records in order within a probe
// interval, and the key stays parked, with the new error, if its first record still fails.
func ExampleRedrive() {
	var pool *pgxpool.Pool // the service's own pool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/processes/{name}/parked", func(w http.ResponseWriter, r *http.Request) {
		keys, err := cursor.Parked(r.Context(), pool, r.PathValue("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(keys) // each key: its records, the first one, its error, since when
	})
	mux.HandleFunc("POST /admin/processes/{name}/parked/{key}/redrive", func(w http.ResponseWriter, r *http.Request) {
		entry, err := cursor.Redrive(r.Context(), pool, r.PathValue("name"), cursor.RedriveOpts{Key: r.PathValue("key"),
			ActionOpts: cursor.ActionOpts{Actor: userOf(r), Reason: r.FormValue("reason")}})
		switch {
		case errors.Is(err, cursor.ErrUnknownProcess), errors.Is(err, cursor.ErrNotParked):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			_ = json.NewEncoder(w).Encode(entry) // who, why, when, and the keys asked for
		}
	})
}

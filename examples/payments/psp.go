package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/handlers/webhook"
)

// pspSchema is the fake payment processor's own storage. A real one keeps it in its own systems; the fake
// keeps it in a schema of the example's database so that its memory survives a restart of the program,
// as a real payment processor's does.
const pspSchema = `
	CREATE SCHEMA IF NOT EXISTS fake_psp;
	CREATE TABLE IF NOT EXISTS fake_psp.charges (
		n               bigserial PRIMARY KEY,
		idempotency_key text NOT NULL UNIQUE,
		customer_id     text NOT NULL,
		seq             bigint NOT NULL,
		kind            text NOT NULL,
		amount_cents    bigint NOT NULL,
		UNIQUE (customer_id, seq)
	);`

// charge is one event the payment processor charged.
type charge struct {
	// Key is the request's Idempotency-Key: <process>:<event id>.
	Key         string
	Customer    string
	Seq         int64
	Kind        string
	AmountCents int64
}

// usageRequest is the part of a webhook request body the payment processor reads.
type usageRequest struct {
	Process string `json:"process"`
	ID      string `json:"id"`
	Record  struct {
		Customer    string `json:"customer_id"`
		Seq         int64  `json:"seq"`
		Kind        string `json:"kind"`
		AmountCents int64  `json:"amount_cents"`
	} `json:"record"`
}

// paymentProcessor is a fake payment processor that behaves as a careful real one does: it authenticates
// each request, charges each idempotency key once, and refuses an event that is not the next of its
// customer.
type paymentProcessor struct {
	secret []byte
	db     *pgxpool.Pool
	log    zerolog.Logger

	// What follows is in memory only: it is for the tests to observe.
	mu       sync.Mutex
	requests map[string]int // idempotency key -> requests received, redeliveries included
	refused  []string       // why requests were refused
	// loseResponse holds "<customer>/<seq>" of events whose first charge answers 500 as if the response
	// were lost on the way back: the sender must deliver the event again. Tests arm it.
	loseResponse map[string]bool
}

// newPaymentProcessor returns a payment processor that stores its charges in the database at
// databaseURL. Close it when done.
func newPaymentProcessor(ctx context.Context, databaseURL string, secret []byte, log zerolog.Logger) (*paymentProcessor, error) {
	db, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("payment processor: %w", err)
	}
	if _, err := db.Exec(ctx, pspSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("payment processor: create schema: %w", err)
	}
	return &paymentProcessor{
		secret:       secret,
		db:           db,
		log:          log.With().Str("component", "payment-processor").Logger(),
		requests:     map[string]int{},
		loseResponse: map[string]bool{},
	}, nil
}

// Close releases the payment processor's database connections.
func (p *paymentProcessor) Close() { p.db.Close() }

// start serves the payment processor on a free port of 127.0.0.1 and returns its webhook URL and a
// function that stops it.
func (p *paymentProcessor) start() (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("payment processor: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/usage", p.handleUsage)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error().Err(err).Msg("serve")
		}
	}()
	return "http://" + ln.Addr().String() + "/v1/usage", func() { _ = srv.Close() }, nil
}

// errOutOfSequence is a usage event that is not the next of its customer.
var errOutOfSequence = errors.New("out of sequence")

// handleUsage charges one event. It answers 2xx once the charge is stored, or when it was stored before.
func (p *paymentProcessor) handleUsage(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := webhook.VerifyRequest(p.secret, r, 5*time.Minute); err != nil {
		p.refuse(w, http.StatusUnauthorized, err.Error())
		return
	}
	var req usageRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		p.refuse(w, http.StatusBadRequest, "malformed body: "+err.Error())
		return
	}
	// Only the body is signed: the key must name the event the signed body carries.
	key := r.Header.Get(webhook.IdempotencyKeyHeader)
	if key != req.Process+":"+req.ID {
		p.refuse(w, http.StatusBadRequest, fmt.Sprintf("Idempotency-Key %q does not name the signed event", key))
		return
	}
	p.mu.Lock()
	p.requests[key]++
	p.mu.Unlock()

	ev := req.Record
	c := charge{Key: key, Customer: ev.Customer, Seq: ev.Seq, Kind: ev.Kind, AmountCents: ev.AmountCents}
	fresh, err := p.charge(r.Context(), c)
	switch {
	case errors.Is(err, errOutOfSequence):
		// A gap or a reordering: answering 409 makes it a permanent failure that halts the stream.
		p.refuse(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		p.log.Error().Err(err).Str("key", key).Msg("store charge")
		http.Error(w, "could not store the charge", http.StatusInternalServerError)
		return
	case !fresh:
		p.log.Info().Str("key", key).Msg("already charged; acknowledging the redelivery")
		writeJSON(w, http.StatusOK, map[string]string{"status": "already_charged"})
		return
	}
	p.log.Info().Str("customer", c.Customer).Int64("seq", c.Seq).Str("kind", c.Kind).
		Int64("amount_cents", c.AmountCents).Msg("charged")
	if p.loseOnce(c) {
		http.Error(w, "charged, but the response was lost", http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "charged"})
}

// charge stores c unless its key was charged before, and reports whether it did. It returns an error
// wrapping errOutOfSequence when c is not the next event of its customer.
func (p *paymentProcessor) charge(ctx context.Context, c charge) (fresh bool, err error) {
	err = pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		// One customer's charges are serialised on a transaction-level lock.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", c.Customer); err != nil {
			return err
		}
		var seen bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM fake_psp.charges WHERE idempotency_key = $1)",
			c.Key).Scan(&seen); err != nil || seen {
			return err
		}
		var last int64
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0) FROM fake_psp.charges WHERE customer_id = $1",
			c.Customer).Scan(&last); err != nil {
			return err
		}
		if c.Seq != last+1 {
			return fmt.Errorf("%w: customer %s: got event %d, expected %d", errOutOfSequence, c.Customer, c.Seq, last+1)
		}
		fresh = true
		_, err := tx.Exec(ctx, `
			INSERT INTO fake_psp.charges (idempotency_key, customer_id, seq, kind, amount_cents)
			VALUES ($1, $2, $3, $4, $5)`, c.Key, c.Customer, c.Seq, c.Kind, c.AmountCents)
		return err
	})
	return fresh && err == nil, err
}

func (p *paymentProcessor) refuse(w http.ResponseWriter, code int, reason string) {
	p.mu.Lock()
	p.refused = append(p.refused, reason)
	p.mu.Unlock()
	p.log.Warn().Int("status", code).Str("reason", reason).Msg("refused")
	writeJSON(w, code, map[string]string{"error": reason})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// loseFirstResponse makes the first charge of a customer's event answer 500 after it is stored.
func (p *paymentProcessor) loseFirstResponse(customer string, seq int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseResponse[fmt.Sprintf("%s/%d", customer, seq)] = true
}

// loseOnce reports whether the response to c's charge is to be lost, disarming it.
func (p *paymentProcessor) loseOnce(c charge) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := fmt.Sprintf("%s/%d", c.Customer, c.Seq)
	lose := p.loseResponse[k]
	delete(p.loseResponse, k)
	return lose
}

// chargesMade returns the charges in the order they were made.
func (p *paymentProcessor) chargesMade(ctx context.Context) ([]charge, error) {
	rows, err := p.db.Query(ctx, `
		SELECT idempotency_key, customer_id, seq, kind, amount_cents FROM fake_psp.charges ORDER BY n`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[charge])
}

// requestsFor returns how many requests carried an idempotency key.
func (p *paymentProcessor) requestsFor(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[key]
}

// refusals returns why requests were refused.
func (p *paymentProcessor) refusals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

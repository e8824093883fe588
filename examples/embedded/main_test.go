package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/processor/processortest"
)

// syncBuffer collects a child process's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// build compiles the example into the test's temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "embedded")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// postOrder places an order and returns its id. It reports failures as an error, since it runs on
// goroutines other than the test's.
func postOrder(base, customer string, totalCents int64) (int64, error) {
	body := fmt.Sprintf(`{"customer":%q,"total_cents":%d}`, customer, totalCents)
	resp, err := http.Post(base+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("POST /orders: %s", resp.Status)
	}
	var o order
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		return 0, err
	}
	return o.ID, nil
}

// confirmations returns the order ids of the "order confirmation sent" log lines, in log order.
func confirmations(logs string) []int64 {
	var out []int64
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line struct {
			Message string `json:"message"`
			OrderID int64  `json:"order_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "order confirmation sent" {
			out = append(out, line.OrderID)
		}
	}
	return out
}

var listening = regexp.MustCompile(`listening on (\S+)`)

// TestServiceConfirmsOrdersAndStopsCleanly runs the example as a real child process: it places orders over
// HTTP, waits until the embedded processor's durable position reaches the last order, then sends SIGTERM.
// The service must exit with status 0 having confirmed every order once and in order, and leave no session
// that holds the cursor.
func TestServiceConfirmsOrdersAndStopsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := processortest.NewDB(t, nil)
	bin := build(t)

	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL) // the last value of a key wins
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	})

	var base string
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(stdout.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	}, 60*time.Second, 10*time.Millisecond, "waiting for the service to listen")

	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = http.Post(base+"/orders", "application/json", strings.NewReader(`{"customer":""}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "an invalid order is refused")

	// Four clients place five orders each, concurrently.
	var mu sync.Mutex
	var ids []int64
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 5 {
				id, err := postOrder(base, fmt.Sprintf("customer-%d@example.com", c), int64(1000+i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, ids, 20)

	processortest.WaitCaughtUp(t, db, process, &processortest.WaitOpts{Timeout: 30 * time.Second})
	var last, pos string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id::text FROM orders ORDER BY coalesce(inorder_at, created_at) DESC, id DESC LIMIT 1").Scan(&last))
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT position_id FROM inorder.position WHERE process_name = $1", process).Scan(&pos))
	require.Equal(t, last, pos, "the position is the last order")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "the service exits with status 0 after SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not exit within 30s of SIGTERM")
	}
	require.Equal(t, 0, cmd.ProcessState.ExitCode())
	logs := stderr.String()
	require.Contains(t, logs, "cursor released", "the processor released its cursor before exiting")

	// Every order was confirmed once, in the order the orders were stored.
	rows, err := db.Pool.Query(ctx, "SELECT id FROM orders ORDER BY coalesce(inorder_at, created_at), id")
	require.NoError(t, err)
	stored, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.ElementsMatch(t, ids, stored)
	require.Equal(t, stored, confirmations(logs))

	// Nothing holds the cursor: no inorder session is left, and its ownership lock is free.
	require.Eventually(t, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE application_name LIKE 'inorder:%' AND datname = current_database()`).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "waiting for the inorder session to end")
	procs, err := cursor.Read(ctx, db.Pool, cursor.ReadOpts{Process: process})
	require.NoError(t, err)
	require.Len(t, procs, 1)
	require.False(t, procs[0].Info.Locked, "no instance owns the process: its ownership lock is free")
	require.Zero(t, procs[0].Info.Connected, "no instance is connected")
}

// TestRunStopsWhenItsContextIsDone runs the service in the test's own process and stops it by cancelling
// the context given to run, as a service that owns its shutdown would: run returns nil once the processor
// has made its position durable and released the cursor.
func TestRunStopsWhenItsContextIsDone(t *testing.T) {
	t.Parallel()
	db := processortest.NewDB(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := &syncBuffer{}
	logs := &syncBuffer{}
	result := make(chan error, 1)
	go func() { result <- run(ctx, db.URL, "127.0.0.1:0", stdout, zerolog.New(logs), nil) }()

	var base string
	require.Eventually(t, func() bool {
		if m := listening.FindStringSubmatch(stdout.String()); m != nil {
			base = "http://" + m[1]
		}
		return base != ""
	}, 60*time.Second, 10*time.Millisecond, "waiting for the service to listen")
	id, err := postOrder(base, "ada@example.com", 4200)
	require.NoError(t, err)
	processortest.WaitCaughtUp(t, db, process, &processortest.WaitOpts{Timeout: 30 * time.Second})

	cancel()
	select {
	case err := <-result:
		require.NoError(t, err, "a cancelled context is a clean stop")
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its context being cancelled")
	}
	require.Equal(t, []int64{id}, confirmations(logs.String()))
	require.Contains(t, logs.String(), "cursor released", "the processor released its cursor before returning")
	procs, err := cursor.Read(context.Background(), db.Pool, cursor.ReadOpts{Process: process})
	require.NoError(t, err)
	require.Len(t, procs, 1)
	require.Equal(t, strconv.FormatInt(id, 10), procs[0].Info.Position.ID, "the position of the last order is durable")
}

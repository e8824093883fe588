package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemoRunsTheStory runs the demo for a few seconds: the relay must deliver every booking, in order
// per customer, and stop cleanly.
func TestDemoRunsTheStory(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	sum, err := run(context.Background(), options{Duration: 4 * time.Second, InsertEvery: 200 * time.Millisecond,
		Out: &out, Logs: io.Discard})
	require.NoError(t, err, out.String())
	require.True(t, sum.InOrder, out.String())
	require.GreaterOrEqual(t, sum.Inserted, 15)
	require.GreaterOrEqual(t, sum.Received, sum.Inserted, out.String())
	require.Contains(t, out.String(), "0 behind; every key in order")
	require.Contains(t, out.String(), "the order kept is per customer", "the interleaving of customers is explained")
	require.False(t, strings.Contains(out.String(), "OUT OF ORDER"))
}

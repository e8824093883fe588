package stdout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/stdout"
)

// TestARowLineIsWhatScriptsRelyOn writes rows of every kind a generic read gives through the handler and
// compares each line with json.Marshal of {"process", "record"}: the format scripts rely on, byte for byte.
func TestARowLineIsWhatScriptsRelyOn(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	rows := []handlers.Row{
		{Columns: []string{"id", "aggregate_id", "seq", "created_at"}, Values: []any{int64(7), "a<1>&\"b\"\n", int32(3), at}},
		{Columns: []string{"payload", "note", "ok", "gone"}, Values: []any{json.RawMessage(` {"a": "<x>", "b": [1, 2]} `),
			"bad\xffutf8 \u2028", true, nil}},
		{Columns: []string{"amount", "raw", "small"}, Values: []any{1.5e-7, []byte{0, 1, 2}, int16(-4)}},
		{Columns: []string{"q\"uote"}, Values: []any{json.RawMessage(nil)}},
	}
	var out bytes.Buffer
	h := stdout.New[handlers.Row](&out)
	ctx := context.Background()
	var want bytes.Buffer
	for i, row := range rows {
		rec := &handlers.Record[handlers.Row]{Process: "booking_sms", ID: "r", Value: row}
		require.NoError(t, h.Handle(ctx, rec), "row %d", i)
		line, err := json.Marshal(struct {
			Process string       `json:"process"`
			Record  handlers.Row `json:"record"`
		}{"booking_sms", row})
		require.NoError(t, err)
		want.Write(append(line, '\n'))
	}
	require.NoError(t, h.Flush(ctx))
	require.Equal(t, want.String(), out.String())

	bad := &handlers.Record[handlers.Row]{Process: "booking_sms", ID: "9", Value: handlers.Row{Columns: []string{"x"}, Values: []any{math.NaN()}}}
	err := h.Handle(ctx, bad)
	require.True(t, handlers.IsPermanent(err), "a value with no JSON form is the record's: %v", err)
	require.ErrorContains(t, err, `encode record 9 as JSON: json: error calling MarshalJSON for type handlers.Row: column "x": json: unsupported value: NaN`)
}

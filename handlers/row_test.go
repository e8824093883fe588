package handlers_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/handlers"
)

func TestRowText(t *testing.T) {
	t.Parallel()
	at := time.Date(2024, 5, 6, 9, 8, 9, 123456000, time.FixedZone("CEST", 2*3600))
	row := handlers.Row{
		Columns: []string{"s", "b", "js", "jo", "t", "n", "null", "event_type"},
		Values: []any{"booking.created", []byte("raw"), json.RawMessage(`"quoted"`), json.RawMessage(`{"a": 1}`), at,
			int64(42), nil, "from event_type"},
	}
	for _, tc := range []struct {
		columns []string
		want    string
		ok      bool
	}{
		{[]string{"s"}, "booking.created", true},
		{[]string{"b"}, "raw", true},
		{[]string{"js"}, "quoted", true},
		{[]string{"jo"}, `{"a": 1}`, true},
		{[]string{"t"}, "2024-05-06T07:08:09.123456Z", true},
		{[]string{"n"}, "42", true},
		{[]string{"null"}, "", false},
		{[]string{"missing"}, "", false},
		{nil, "", false},
		{[]string{"type", "event_type"}, "from event_type", true},
		{[]string{"s", "event_type"}, "booking.created", true},
		{[]string{"null", "event_type"}, "", false}, // the first column the row has decides, NULL or not
	} {
		got, ok := row.Text(tc.columns...)
		require.Equal(t, tc.ok, ok, "%v", tc.columns)
		require.Equal(t, tc.want, got, "%v", tc.columns)
	}
}

func TestRowPayload(t *testing.T) {
	t.Parallel()
	row := func(v any) handlers.Row {
		return handlers.Row{Columns: []string{"id", "payload"}, Values: []any{int64(7), v}}
	}
	for _, tc := range []struct {
		name   string
		row    handlers.Row
		column string
		want   []byte
	}{
		{"jsonb as is", row(json.RawMessage(`{"seats": 2}`)), "payload", []byte(`{"seats": 2}`)},
		{"text as its bytes", row("plain <text>"), "payload", []byte("plain <text>")},
		{"bytea as is", row([]byte{0, 0xff}), "payload", []byte{0, 0xff}},
		{"NULL as nil", row(nil), "payload", nil},
		{"other values as JSON", row(2.5), "payload", []byte(`2.5`)},
		{"time as JSON", row(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)), "payload", []byte(`"2024-05-06T07:08:09Z"`)},
		{"no such column: the whole row", row("x"), "body", []byte(`{"id":7,"payload":"x"}`)},
		{"empty column: the whole row", row(json.RawMessage(`{"a": 1}`)), "", []byte(`{"id":7,"payload":{"a":1}}`)},
		{"a column named empty is not chosen", handlers.Row{Columns: []string{""}, Values: []any{"v"}}, "", []byte(`{"":"v"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.row.Payload(tc.column)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	_, err := row(math.NaN()).Payload("payload")
	require.EqualError(t, err, `column "payload": json: unsupported value: NaN`)
	_, err = row(math.NaN()).Payload("")
	require.EqualError(t, err, `column "payload": json: unsupported value: NaN`)
}

package processor

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/cursor"
)

// TestSourceSpecCarriesEveryField fills every field of Source and finds each in the spec the machinery
// takes: a field added to one and not passed on fails here instead of being dropped without a word.
func TestSourceSpecCarriesEveryField(t *testing.T) {
	t.Parallel()
	src := Source{Table: "t", IDColumn: "i", CreatedAtColumn: "c", Horizon: HorizonWriters, KeyColumn: "k",
		Partition: &cursor.Partition{Index: 1, Count: 2}, Columns: []string{"a"}, TraceColumn: "tp", TraceStateColumn: "ts"}
	sv := reflect.ValueOf(src)
	for i := range sv.NumField() {
		require.False(t, sv.Field(i).IsZero(), "the test leaves Source.%s zero: set it", sv.Type().Field(i).Name)
	}
	spec := reflect.ValueOf(src.spec())
	require.Equal(t, sv.NumField(), spec.NumField(), "Source and the spec have as many fields")
	for i := range sv.NumField() {
		name := sv.Type().Field(i).Name
		got := spec.FieldByName(name)
		require.True(t, got.IsValid(), "the spec has no field %s", name)
		require.Equal(t, sv.Field(i).Interface(), got.Interface(), "Source.%s reaches the spec", name)
	}
}

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestByteSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
		err  string
	}{
		{in: "8MiB", want: 8 << 20},
		{in: "512KiB", want: 512 << 10},
		{in: "1GiB", want: 1 << 30},
		{in: "16MB", want: 16_000_000},
		{in: "300kB", want: 300_000},
		{in: "4096", want: 4096},
		{in: " 2 MiB ", want: 2 << 20},
		{in: "8XB", err: `"8XB" is not a size`},
		{in: "-1MiB", err: `"-1MiB" is not a size`},
		{in: "2048GiB", err: "larger than 1TiB"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			var s byteSize
			err := s.Set(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, int(s))
			var again byteSize
			require.NoError(t, again.Set(s.String()), "String gives back what Set reads")
			require.Equal(t, s, again)
		})
	}
}

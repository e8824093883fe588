package console

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/source"
)

// excerptRunes is how much of a halted record's content a page shows: enough to recognise the record,
// never a whole document of megabytes.
const excerptRunes = 300

// halted is the record a stream is halted on or retrying, as the page shows it: its key and the start
// of its content (the row as JSON), or why they could not be read.
type halted struct {
	Key     string
	HasKey  bool // the process has a key column
	Excerpt string
	Clipped bool // the content goes on past Excerpt
	Err     string
}

// readHalted reads the record a stream is stuck on from its table: its key as text and an excerpt of the
// row as JSON. The database cuts the excerpt, so that a big row costs the page no more than the excerpt.
func readHalted(ctx context.Context, q source.Querier, s cursor.Info) halted {
	t, err := source.Inspect(ctx, q, s.Source)
	if err != nil {
		return halted{Err: err.Error()}
	}
	id := pgx.Identifier{t.Spec.IDColumn}.Sanitize()
	key := "NULL::text"
	var h halted
	if t.Spec.KeyColumn != "" {
		key, h.HasKey = "src."+pgx.Identifier{t.Spec.KeyColumn}.Sanitize()+"::text", true
	}
	// IDCast is one of a few type names the source chose (bigint, uuid, text...), never the operator's.
	sql := fmt.Sprintf(`SELECT coalesce(%s, ''), left(j, $2), length(j) > $2
		FROM %s AS src, LATERAL (SELECT (to_jsonb(src) - $3::text)::text AS j) AS r
		WHERE src.%s = $1::%s LIMIT 1`, key, t.Ident, id, t.IDCast)
	// The insert clock is inorder's, not the record's: left out, as the records leave it out.
	err = q.QueryRow(ctx, sql, s.Halt.RecordID, excerptRunes, source.ClockColumn).Scan(&h.Key, &h.Excerpt, &h.Clipped)
	switch {
	case err == pgx.ErrNoRows:
		return halted{Err: "the record is no longer in the table"}
	case err != nil:
		return halted{Err: err.Error()}
	}
	return h
}

// plainArg is what a shell reads as one word as it is.
var plainArg = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=-]+$`)

// shellArg quotes s for a POSIX shell when it needs quoting, so that a command on a page can be pasted
// as it is whatever the process's name or the record's id.
func shellArg(s string) string {
	if plainArg.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

package handlers

import (
	"context"

	"github.com/inorder-dev/inorder/internal/progress"
)

// Progress tells the processor that the handler call of ctx is still moving bytes to its sink (a body
// still going out, an answer still coming in): the call's handler timeout counts again from now. A call
// that keeps reporting progress goes on past the timeout, so that a big record on a slow link is not taken
// for a hung sink, though never past the time the processor's lease covers it, where it is cut off with an
// error that says so; a call that falls silent for the timeout is cut off as before. Report as bytes move,
// as often as they do: it costs a context lookup and a read of the clock, from any goroutine. On a context
// that carries no call the processor bounds this way (one of a keyed window, an AsyncHandler's Send, a
// context of your own), it does nothing.
func Progress(ctx context.Context) {
	if r, ok := ctx.Value(progress.Key{}).(progress.Reporter); ok {
		r.Progress()
	}
}

// Package progress carries, in the context of a handler call, what handlers.Progress tells: that the call
// is still moving bytes to its sink. The processor puts a Reporter in the context of every call it bounds
// with a deadline that moves on progress, and handlers.Progress finds it there. It stands apart from both
// so that the public API holds the one function, handlers.Progress, and no key or interface besides.
package progress

// Key is the context key under which a handler call's Reporter is found. A context answers it with a
// Reporter, or with nil when no deadline of the processor's bounds the call.
type Key struct{}

// Reporter is told that the handler call of the context it was found in is still moving bytes. Progress
// must be cheap and safe to call from any goroutine, during the call and after it (when it does nothing),
// since a sink reports from wherever its bytes move: an HTTP transport's writing goroutine, say.
type Reporter interface {
	Progress()
}

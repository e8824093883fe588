package console

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/inorder-dev/inorder/cursor"
)

// sample is how far behind a process was at one time.
type sample struct {
	At      time.Time
	Rows    int64
	Seconds float64
}

// history keeps each process's lag samples over a window (an hour), at most one per few seconds.
type history struct {
	mu     sync.Mutex
	window time.Duration
	by     map[string][]sample
}

func newHistory(window time.Duration) *history {
	return &history{window: window, by: map[string][]sample{}}
}

// add keeps a sample of lag, taken now.
func (h *history) add(process string, lag cursor.Lag) {
	now := time.Now()
	s := sample{At: now, Rows: lag.Rows}
	if !lag.Oldest.IsZero() && !lag.Now.IsZero() {
		s.Seconds = max(0, lag.Now.Sub(lag.Oldest).Seconds())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ss := h.by[process]
	if n := len(ss); n > 0 && now.Sub(ss[n-1].At) < 2*time.Second {
		ss[n-1] = s // page views close together make one sample
	} else {
		ss = append(ss, s)
	}
	cut := 0
	for cut < len(ss) && now.Sub(ss[cut].At) > h.window {
		cut++
	}
	h.by[process] = append([]sample(nil), ss[cut:]...)
}

// of returns a copy of a process's samples, oldest first.
func (h *history) of(process string) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sample(nil), h.by[process]...)
}

// chart draws the rows behind over the last hour as an inline SVG polyline, the newest at the right.
// Only numbers go into it.
func chart(ss []sample, width, height int) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="rows behind over the last hour">`,
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#f6f8fa"/>`, width, height)
	if len(ss) > 0 {
		var top int64 = 1
		for _, s := range ss {
			top = max(top, s.Rows)
		}
		now := time.Now()
		b.WriteString(`<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="`)
		for _, s := range ss {
			x := float64(width) * (1 - now.Sub(s.At).Seconds()/time.Hour.Seconds())
			y := float64(height-2) - float64(height-4)*float64(s.Rows)/float64(top)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		b.WriteString(`"/>`)
		fmt.Fprintf(&b, `<text x="2" y="10" font-size="9" fill="#57606a">%d</text>`, top)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var funcs = template.FuncMap{
	"chart": chart,
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return now.Sub(t).Round(time.Second).String()
	},
	"behind": func(l *cursor.Lag) string {
		if l == nil || l.Oldest.IsZero() {
			return "0s"
		}
		return l.Now.Sub(l.Oldest).Round(time.Second).String()
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"path":     url.PathEscape,
	"held":     func(d time.Duration) string { return d.Round(time.Second).String() },
	"xminCost": func() string { return cursor.XminHoldCost },
	"transactions": func(n int64) string {
		if n == 1 {
			return "1 transaction"
		}
		return fmt.Sprintf("%d transactions", n)
	},
}

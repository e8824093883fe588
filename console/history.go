package console

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/xmin"
)

// sample is how far behind a process was at one time.
type sample struct {
	At      time.Time
	Rows    int64
	Seconds float64
}

// history keeps each process's lag samples over a window (an hour), at most one per merge: samples
// closer together than that (page views, a refresh beside a round of Console.Run) make one.
type history struct {
	mu     sync.Mutex
	window time.Duration
	merge  time.Duration
	by     map[string][]sample
}

func newHistory(window, merge time.Duration) *history {
	return &history{window: window, merge: merge, by: map[string][]sample{}}
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
	if n := len(ss); n > 0 && now.Sub(ss[n-1].At) < h.merge {
		ss[n-1] = s // samples close together make one
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

// chart draws the rows behind over the last hour as an inline SVG, the newest at the right: a y axis in
// rows from 0 to the hour's most, an x axis in minutes before now, and the samples as a line. A small one
// (the overview's) keeps the axes' ends alone. Only numbers and fixed words go into it.
func chart(ss []sample, width, height int) template.HTML {
	return template.HTML(drawChart(ss, width, height, time.Now()))
}

func drawChart(ss []sample, width, height int, now time.Time) string {
	small := height < 60
	// The plot's box within the picture: room on the left for the rows, below for the minutes.
	left, right, top, bottom := 46.0, float64(width)-6, 12.0, float64(height)-16
	if small {
		left, right, top, bottom = 34, float64(width)-2, 6, float64(height)-11
	}
	var most int64
	for _, s := range ss {
		most = max(most, s.Rows)
	}
	ceiling := niceCeiling(most)
	x := func(at time.Time) float64 {
		return left + (right-left)*(1-now.Sub(at).Seconds()/time.Hour.Seconds())
	}
	y := func(rows int64) float64 { return bottom - (bottom-top)*float64(rows)/float64(ceiling) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="rows behind over the last hour">`,
		width, height, width, height)
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f6f8fa"/>`, left, top, right-left, bottom-top)
	const label = `<text x="%.1f" y="%.1f" font-size="%d" fill="#57606a" text-anchor="%s">%s</text>`
	font := 10
	if small {
		font = 9
	}
	// The y axis: 0 and the ceiling (and half of it on a large chart), in rows.
	ticks := []int64{0, ceiling}
	if !small && ceiling >= 2 {
		ticks = []int64{0, ceiling / 2, ceiling}
	}
	for _, v := range ticks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d0d7de"/>`, left, y(v), right, y(v))
		fmt.Fprintf(&b, label, left-3, y(v)+3, font, "end", count(v))
	}
	unit := "rows behind"
	if small {
		unit = "rows"
	}
	fmt.Fprintf(&b, label, left+4, top+float64(font)+1, font, "start", unit)
	// The x axis: minutes before now.
	minutes := []int{60, 45, 30, 15, 0}
	if small {
		minutes = []int{60, 0}
	}
	for _, m := range minutes {
		at := x(now.Add(-time.Duration(m) * time.Minute))
		anchor, text := "middle", fmt.Sprintf("−%dm", m)
		switch m {
		case 0:
			anchor, text = "end", "now"
		case 60:
			anchor = "start"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#8c959f"/>`, at, bottom, at, bottom+3)
		fmt.Fprintf(&b, label, at, float64(height)-2, font, anchor, text)
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#8c959f"/>`, left, top, left, bottom)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#8c959f"/>`, left, bottom, right, bottom)
	if len(ss) == 0 {
		fmt.Fprintf(&b, label, (left+right)/2, (top+bottom)/2+3, font, "middle", "no sample yet")
	}
	if len(ss) > 1 {
		b.WriteString(`<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="`)
		for _, s := range ss {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(s.At), y(s.Rows))
		}
		b.WriteString(`"/>`)
	}
	if len(ss) > 0 { // the latest, which a line an hour wide would leave a sliver at the edge
		last := ss[len(ss)-1]
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="#0969da"/>`, x(last.At), y(last.Rows))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeiling is the top of the y axis: the least of 1, 2 or 5 times a power of ten that is at least
// rows (and at least 1).
func niceCeiling(rows int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= rows {
				return m * p
			}
		}
	}
}

// count writes a number of rows short: 950, 1.2k, 3M.
func count(n int64) string {
	switch {
	case n >= 1_000_000:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	case n >= 1_000:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	}
	return fmt.Sprint(n)
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
	"shell":    shellArg,
	"held":     func(d time.Duration) string { return d.Round(time.Second).String() },
	"xminCost": func() string { return xmin.HoldCost },
	"transactions": func(n int64) string {
		if n == 1 {
			return "1 transaction"
		}
		return fmt.Sprintf("%d transactions", n)
	},
}

package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/xmin"
)

//go:embed templates/*.html
var templates embed.FS

// Config configures a console.
type Config struct {
	// Pool reads the cursor rows and runs the actions. Required.
	Pool *pgxpool.Pool
	// Token, when set, is what every request must carry: a bearer token, or the session cookie the login
	// page sets once it is typed in. Empty means loopback clients only: the console refuses any other.
	Token string
	// AllowActions shows the action forms and accepts them. False means read-only: no form is shown, and
	// every action is refused.
	AllowActions bool
	// ActorFunc, when set, names the person acting from the request, as the service that mounts the
	// console knows them (its own sign-in, a header its proxy sets after authenticating): the actions are
	// audited under that name, and the forms do not ask for one. An empty name refuses the action. Nil
	// means the forms ask for the operator's name, which the audit keeps as given.
	ActorFunc func(r *http.Request) string
	// RefreshInterval is how often the pages refresh their figures (with a little JavaScript; the pages
	// read the same without it). Zero means 5s.
	RefreshInterval time.Duration
	// XminHoldAfter is how long a session, a prepared transaction, a replication slot or a standby's
	// feedback may hold the database's xmin horizon (vacuum's) before the pages name it. Zero means
	// a minute.
	XminHoldAfter time.Duration
	// SampleInterval is how often Run measures every process's lag for the pages' charts, which show
	// the last hour of it. Zero means 15s, as often as a processor measures it for its metrics.
	SampleInterval time.Duration
}

// Console serves the pages and the actions. It is an http.Handler, safe for concurrent use; mount it at
// the root of a server or under a prefix with http.StripPrefix (its links are relative).
type Console struct {
	cfg     Config
	pages   *template.Template
	history *history
	// xmin remembers since when each holder of the xmin horizon has been seen, across page views.
	xmin  *xmin.Watch
	mux   *http.ServeMux
	guard *http.CrossOriginProtection
}

// New checks cfg and returns a console. It does not touch the database.
func New(cfg Config) (*Console, error) {
	if cfg.Pool == nil {
		return nil, errors.New("console: Config.Pool is required")
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 5 * time.Second
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 15 * time.Second
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(templates, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c := &Console{cfg: cfg, pages: pages, history: newHistory(time.Hour, min(2*time.Second, cfg.SampleInterval/2)), xmin: xmin.NewWatch(cfg.XminHoldAfter),
		mux: http.NewServeMux(), guard: http.NewCrossOriginProtection()}
	c.mux.HandleFunc("GET /{$}", c.overview)
	c.mux.HandleFunc("GET /process/{name}", c.process)
	c.mux.HandleFunc("POST /process/{name}/action/{action}", c.act)
	return c, nil
}

// Run measures every process's lag each Config.SampleInterval until ctx ends, then returns nil: the
// charts then show the last hour as the console saw it (since it started), where without Run they hold
// only what the pages' own views measured. A round that cannot read the database is skipped; the pages
// say why. Run once per console, beside serving it.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		c.sample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sample measures every process's lag once, keeping a sample of each.
func (c *Console) sample(ctx context.Context) {
	procs, err := cursor.Read(ctx, c.cfg.Pool, cursor.ReadOpts{})
	if err != nil {
		return
	}
	for _, p := range procs {
		c.measure(ctx, p)
	}
}

// ServeHTTP checks who asks (the token, or a loopback client), then serves the page or the action.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	if c.cfg.Token == "" {
		if msg := localOnly(r); msg != "" {
			http.Error(w, msg, http.StatusForbidden)
			return
		}
	}
	if c.cfg.Token != "" && !c.authenticated(r) {
		if r.Method == http.MethodPost && r.PostFormValue("console_token") != "" {
			c.login(w, r)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, "login", map[string]any{"Failed": r.Method == http.MethodPost})
		return
	}
	if r.Method == http.MethodPost {
		if err := c.guard.Check(r); err != nil {
			http.Error(w, "refused: a cross-origin request", http.StatusForbidden)
			return
		}
		if !c.csrfValid(r) {
			http.Error(w, "refused: the form's CSRF token is missing or does not match; reload the page and try again", http.StatusForbidden)
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

// localOnly says why a console without a token refuses r, or "" when r comes from this machine: from a
// loopback address, straight (a proxy on this machine would make every client look local, so a request a
// proxy forwarded is refused), and for a loopback host name, so that a page elsewhere whose name was
// pointed at 127.0.0.1 (DNS rebinding) cannot read the console from the browser of someone on it.
func localOnly(r *http.Request) string {
	const hint = " (start it with a token, INORDER_CONSOLE_TOKEN, to serve others)"
	switch {
	case !loopback(r.RemoteAddr):
		return "this console answers loopback clients only" + hint
	case r.Header.Get("Forwarded") != "" || r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("X-Real-Ip") != "":
		return "this console does not answer through a proxy without a token" + hint
	case !loopbackHost(r.Host):
		return "this console answers requests for localhost or a loopback address only" + hint
	}
	return ""
}

// loopbackHost reports whether a request's Host names this machine: localhost or a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopback reports whether a request's remote address is a loopback one.
func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// view is what the pages share: the CSRF token for their forms, whether actions are allowed, the refresh.
type view struct {
	CSRF         string
	AllowActions bool
	AskName      bool // the forms ask for the operator's name (no ActorFunc)
	Refresh      int  // milliseconds
	Base         string
	Flash        string
	Error        string
}

func (c *Console) view(w http.ResponseWriter, r *http.Request, base string) view {
	return view{CSRF: c.csrfToken(w, r), AllowActions: c.cfg.AllowActions, AskName: c.cfg.ActorFunc == nil,
		Refresh: int(c.cfg.RefreshInterval / time.Millisecond),
		Base:    base, Flash: r.URL.Query().Get("done")}
}

// row is one process on the overview.
type row struct {
	cursor.Process
	Status  cursor.StreamStatus
	Lag     *cursor.Lag
	LagErr  string
	Samples []sample
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	procs, err := cursor.Read(ctx, c.cfg.Pool, cursor.ReadOpts{})
	if err != nil {
		c.fail(w, err)
		return
	}
	rows := make([]row, 0, len(procs))
	for _, p := range procs {
		rw := c.measure(ctx, p)
		rows = append(rows, rw)
	}
	c.render(w, "overview", map[string]any{"View": c.view(w, r, ""), "Rows": rows, "Now": time.Now(),
		"Xmin": c.lookXmin(ctx)})
}

// xminView is who has held the database's xmin horizon past the threshold, for the pages; Err is why the
// console could not look.
type xminView struct {
	xmin.Hold
	Err string
}

// lookXmin looks at who holds the database's xmin horizon, for a page.
func (c *Console) lookXmin(ctx context.Context) xminView {
	h, err := c.xmin.Look(ctx, c.cfg.Pool)
	if err != nil {
		return xminView{Err: err.Error()}
	}
	return xminView{Hold: h}
}

// measure reads how far behind a process is (each of its streams, summed) and keeps a sample of it.
func (c *Console) measure(ctx context.Context, p cursor.Process) row {
	rw := row{Process: p, Status: p.Info.Status}
	var total cursor.Lag
	measured := false
	for i := range p.Streams {
		in := &p.Streams[i]
		if err := in.Measure(ctx, c.cfg.Pool); err != nil || in.Lag == nil {
			if err != nil {
				rw.LagErr = err.Error()
			}
			continue
		}
		measured = true
		total.Rows += in.Lag.Rows
		total.Capped = total.Capped || in.Lag.Capped
		total.Now = in.Lag.Now
		if !in.Lag.Oldest.IsZero() && (total.Oldest.IsZero() || in.Lag.Oldest.Before(total.Oldest)) {
			total.Oldest = in.Lag.Oldest
		}
		if len(p.Streams) == 1 {
			rw.Status = in.Status
		}
	}
	if measured {
		rw.Lag = &total
		c.history.add(p.Name, total)
	}
	rw.Samples = c.history.of(p.Name)
	return rw
}

// detail is a process page.
type detail struct {
	row
	Parked  []cursor.ParkedKey
	Audit   []cursor.AuditEntry
	Holders map[int]holder
	// Halted are the records the streams are halted on or retrying, by stream.
	Halted map[string]halted
}

// holder is the transaction holding a stream's horizon back, as pg_stat_activity shows it.
type holder struct {
	Application string
	State       string
	Since       time.Time
}

func (c *Console) process(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("name")
	procs, err := cursor.Read(ctx, c.cfg.Pool, cursor.ReadOpts{Process: name})
	if err != nil {
		c.fail(w, err)
		return
	}
	if len(procs) == 0 {
		w.WriteHeader(http.StatusNotFound)
		c.render(w, "missing", map[string]any{"View": c.view(w, r, "../"), "Name": name})
		return
	}
	d := detail{row: c.measure(ctx, procs[0]), Holders: map[int]holder{}, Halted: map[string]halted{}}
	// A role that may not read parked records sees none listed; the counts of the cursor row still show.
	d.Parked, _ = cursor.Parked(ctx, c.cfg.Pool, name)
	if d.Audit, err = cursor.Audit(ctx, c.cfg.Pool, cursor.AuditOpts{Process: name, Limit: 50}); err != nil {
		c.fail(w, err)
		return
	}
	for _, s := range d.Streams {
		if s.Halt != nil && !s.Halt.SinkUnavailable() {
			d.Halted[s.Process] = readHalted(ctx, c.cfg.Pool, s)
		}
		if s.HeldByPID != 0 {
			var h holder
			var since *time.Time
			err := c.cfg.Pool.QueryRow(ctx, `SELECT coalesce(application_name, ''), coalesce(state, ''), xact_start
				FROM pg_stat_activity WHERE pid = $1`, s.HeldByPID).Scan(&h.Application, &h.State, &since)
			if err == nil && since != nil {
				h.Since = *since
			}
			if err == nil || errors.Is(err, pgx.ErrNoRows) {
				d.Holders[s.HeldByPID] = h
			}
		}
	}
	v := c.view(w, r, "../")
	c.render(w, "process", map[string]any{"View": v, "P": &d, "Now": time.Now(), "Xmin": c.lookXmin(ctx)})
}

// act runs one action through package cursor, with the operator's name and reason, and goes back to the
// process page saying what it did.
func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if !c.cfg.AllowActions {
		http.Error(w, "refused: this console is read-only (start it with --allow-actions)", http.StatusForbidden)
		return
	}
	actor, reason := strings.TrimSpace(r.PostFormValue("actor")), strings.TrimSpace(r.PostFormValue("reason"))
	if c.cfg.ActorFunc != nil {
		actor = strings.TrimSpace(c.cfg.ActorFunc(r))
	}
	if actor == "" || reason == "" {
		http.Error(w, "refused: an action needs your name and a reason, which the audit keeps", http.StatusBadRequest)
		return
	}
	opts := cursor.ActionOpts{Actor: actor + " (console)", Reason: reason}
	ctx := r.Context()
	var err error
	switch action {
	case "pause":
		_, err = cursor.Pause(ctx, c.cfg.Pool, name, opts)
	case "resume":
		_, err = cursor.Resume(ctx, c.cfg.Pool, name, opts)
	case "retry":
		_, err = cursor.Retry(ctx, c.cfg.Pool, name, opts)
	case "skip":
		_, err = cursor.Skip(ctx, c.cfg.Pool, name, r.PostFormValue("record"), opts)
	case "rewind":
		_, err = cursor.Rewind(ctx, c.cfg.Pool, name, cursor.RewindTarget{RecordID: r.PostFormValue("record")}, opts)
	case "redrive":
		key := r.PostFormValue("key")
		_, err = cursor.Redrive(ctx, c.cfg.Pool, name, cursor.RedriveOpts{ActionOpts: opts, Key: key, All: key == ""})
	default:
		http.Error(w, fmt.Sprintf("no action %q", action), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("%s refused: %v", action, err), http.StatusConflict)
		return
	}
	// Relative, so that it holds under a prefix: from process/<name>/action/<action> to process/<name>.
	w.Header().Set("Location", "../../"+url.PathEscape(name)+"?done="+url.QueryEscape(action)) // "../../" first: never a URL of its own
	w.WriteHeader(http.StatusSeeOther)
}

func (c *Console) render(w http.ResponseWriter, page string, data any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	if err := c.pages.ExecuteTemplate(w, page, data); err != nil {
		fmt.Fprintf(w, "<p>could not render the page: %s</p>", template.HTMLEscapeString(err.Error()))
	}
}

func (c *Console) fail(w http.ResponseWriter, err error) {
	// A refused connection in the server's words with its address, as the CLI says it.
	http.Error(w, "could not read the cursor rows: "+dial.Explain(err).Error(), http.StatusInternalServerError)
}

// back is where a login goes once it succeeds: the page it was shown on, by a path relative to it.
func back(r *http.Request) string {
	if strings.HasSuffix(r.URL.Path, "/") {
		return "./"
	}
	// "./" first: a last segment such as "https:evil.example" must not read as a URL of its own.
	return "./" + url.PathEscape(path.Base(r.URL.Path))
}

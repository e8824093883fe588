// Command inorder moves the rows of a Postgres table to a handler, strictly in order, never skipping one.
//
//	inorder migrate [--print]      create or update inorder's tables
//	inorder run [flags]            run a process: read its table, deliver, advance
//	inorder status [--json]        where every process stands, and why it stopped if it did
//	inorder skip|rewind|pause|resume   operator actions, audited
//	inorder audit                  the operator actions taken
//	inorder prune                  delete the rows every process of a table has passed (audited)
//	inorder forget                 remove a stopped process's cursor rows (audited)
//	inorder version                the version, the commit and the Go version (also --version)
//
// Every flag may also be set in the environment as INORDER_<FLAG> (INORDER_WEBHOOK_URL for
// --webhook-url); a flag on the command line wins.
//
// Run `inorder <command> --help` for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/inorder-dev/inorder/cursor"
	"github.com/inorder-dev/inorder/internal/dial"
	"github.com/inorder-dev/inorder/internal/pooler"
	"github.com/inorder-dev/inorder/internal/store"
	"github.com/inorder-dev/inorder/lifecycle"
	"github.com/inorder-dev/inorder/processor"
)

const usage = `inorder moves the rows of a Postgres table to a handler, strictly in order, never skipping one.

Usage:
  inorder migrate [--print]   create or update inorder's tables (--print: show the SQL instead)
  inorder run [flags]         run a process: read its table, deliver each record, advance
  inorder status [flags]      where every process stands, and why a stopped one stopped
  inorder skip [flags]        move past the record a halted stream is stuck on (audited)
  inorder rewind [flags]      deliver again from a record or a time (audited)
  inorder pause | resume      stop a process at its next batch, or let it go on (audited)
  inorder retry [flags]       try a retrying or halted stream's record again now, not after its backoff (audited)
  inorder parked [flags]      list a process's parked keys (run with --on-halt park)
  inorder redrive [flags]     deliver a parked key's records in order, then unpark it (audited)
  inorder repartition [flags] change the number of partitions of a drained, stopped process (audited)
  inorder audit [flags]       list the operator actions
  inorder prune [flags]       delete the rows every process of a table has passed (audited)
  inorder forget [flags]      remove a stopped process's cursor rows; run again, it starts afresh (audited)
  inorder console [flags]     serve the web console: every process, one in detail, the actions
  inorder version             the version, the commit it was built from and the Go version (also --version)

Run 'inorder <command> --help' for the flags of a command.
` + envHelp

// errUsage marks an error in the command line: exit code 2 and no log noise.
var errUsage = errors.New("usage")

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs one command and returns the exit code.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var err error
	switch args[0] {
	case "migrate":
		err = migrateCmd(ctx, args[1:], stdout, stderr)
	case "run":
		err = runCmd(ctx, args[1:], stdout, stderr)
	case "status":
		err = statusCmd(ctx, args[1:], stdout, stderr)
	case "skip":
		err = skipCmd(ctx, args[1:], stdout, stderr)
	case "rewind":
		err = rewindCmd(ctx, args[1:], stdout, stderr)
	case "pause":
		err = pauseCmd(true)(ctx, args[1:], stdout, stderr)
	case "resume":
		err = pauseCmd(false)(ctx, args[1:], stdout, stderr)
	case "parked":
		err = parkedCmd(ctx, args[1:], stdout, stderr)
	case "redrive":
		err = redriveCmd(ctx, args[1:], stdout, stderr)
	case "retry":
		_, err = processAction(ctx, "retry", args[1:], stdout, stderr, cursor.Retry)
	case "repartition":
		err = repartitionCmd(ctx, args[1:], stdout, stderr)
	case "audit":
		err = auditCmd(ctx, args[1:], stdout, stderr)
	case "prune":
		err = pruneCmd(ctx, args[1:], stdout, stderr)
	case "forget":
		err = forgetCmd(ctx, args[1:], stdout, stderr)
	case "console":
		err = consoleCmd(ctx, args[1:], stdout, stderr)
	case "version":
		err = versionCmd(args[1:], stdout)
	default:
		fmt.Fprintf(stderr, "inorder: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var sig *lifecycle.SignalError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &sig): // SIGINT or SIGTERM stopped run or console cleanly
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "inorder %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "usage: "))
		return 2
	default:
		msg := inCLIWords(err)
		fmt.Fprintf(stderr, "inorder %s: %s\n", args[0], msg)
		return 1
	}
}

// inCLIWords is the line an error of a command prints: what to do about a pooler or a database not yet
// migrated, the server's own refusal of a connection with the server's address and without the attempts
// before it (dial.Explain), and a new process's missing start with the flag that
// gives it rather than the library's field.
func inCLIWords(err error) string {
	msg := explainSchema(pooler.Explain(dial.Explain(err))).Error()
	var sfe *processor.StartFromError
	if errors.As(err, &sfe) {
		msg = strings.Replace(msg, sfe.Error(), sfe.Explain("--start-from beginning|now|<RFC 3339 time>"), 1)
	}
	return msg
}

// explainSchema says what to do when the error is that inorder's own tables or columns are missing: the
// database has not been migrated, or not since this binary's version.
func explainSchema(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "inorder.") && !strings.Contains(pgErr.Message, "inorder\"") {
		return err
	}
	switch pgErr.Code {
	case "42P01", "3F000": // undefined table, undefined schema
		return fmt.Errorf("%w; inorder's tables are not in this database: run inorder migrate first", err)
	case "42703", "42883": // undefined column, undefined function
		return fmt.Errorf("%w; inorder's tables are older than this binary: run inorder migrate", err)
	}
	return err
}

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// newFlagSet returns a flag set whose parse errors are reported once, by realMain.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("inorder "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(out)
		fs.Usage()
		fmt.Fprint(out, "\n"+envHelp)
		return err
	}
	if err != nil {
		// The flag package repeats the argument as given; keep the message on one line whatever it holds.
		return usageErr("%s", oneLineText(err.Error()))
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0)) // %q escapes line breaks
	}
	return flagsFromEnv(fs, os.LookupEnv)
}

// oneLineText escapes line breaks and other control characters, so that an error is one line.
func oneLineText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == 0x2028 || r == 0x2029 {
			return '?'
		}
		return r
	}, s)
}

// flagWithDefault is a string flag whose default is worked out when it is used, and shown in its help by
// what it is (the usage text says), never by its value: the database URL holds a password, the actor is
// whoever runs the command.
type flagWithDefault struct {
	value string
	set   bool
	def   func() string
}

func (d *flagWithDefault) String() string { return "" } // the default shown in help: nothing
func (d *flagWithDefault) Set(v string) error {
	d.value, d.set = v, true
	return nil
}

// get returns the flag's value, or its default when it was not given.
func (d *flagWithDefault) get() string {
	if d.set || d.def == nil {
		return d.value
	}
	return d.def()
}

// registerActor adds --actor to fs: who acts, for the audit, by default $USER, else the login name.
func registerActor(fs *flag.FlagSet, d *flagWithDefault, who string) {
	d.def = defaultActor
	fs.Var(d, "actor", "`name` of "+who+", recorded in the audit with the database role (default $USER, else the login name)")
}

// connConfig parses the database URL, naming the flag in the error (never echoing a password).
func connConfig(url string) (*pgx.ConnConfig, error) {
	if url == "" {
		return nil, usageErr("no database: set --database-url or DATABASE_URL")
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, usageErr("invalid --database-url: %s", redactParseError(err))
	}
	return cfg, nil
}

// connect opens one connection to the database d names, and checks that inorder's schema there is as
// new as this binary needs (see store.CheckSchema): a command run before `inorder migrate` says so in one
// line rather than fail on a missing column.
func connect(ctx context.Context, d *databaseURL) (*pgx.Conn, error) {
	conn, err := connectAny(ctx, d)
	if err != nil {
		return nil, err
	}
	if err := store.CheckSchema(ctx, conn); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// connectAny opens one connection to the database d names, whatever its schema (for migrate).
func connectAny(ctx context.Context, d *databaseURL) (*pgx.Conn, error) {
	cfg, before, err := d.connConfig()
	if err != nil {
		return nil, err
	}
	dial.Configure(cfg, 0) // a path that never answers is given up in seconds
	conn, err := dial.Connect(ctx, cfg, before)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", pooler.Explain(err))
	}
	return conn, nil
}

func redactParseError(err error) string {
	// pgx quotes the connection string (its password redacted only as far as it can be found) and, in
	// its explanation, pieces of it. Keep only what quotes nothing of the input.
	const fallback = "it is neither a postgres:// URL nor a key=value connection string"
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return fallback
	}
	text := pce.Error()
	if inner := pce.Unwrap(); inner != nil {
		text = strings.TrimSuffix(text, " ("+inner.Error()+")")
	}
	i := strings.LastIndex(text, "`: ")
	if i < 0 || !safePhrase(text[i+3:]) {
		return fallback
	}
	msg := text[i+3:]
	if inner := pce.Unwrap(); inner != nil && safePhrase(inner.Error()) {
		msg += " (" + inner.Error() + ")"
	}
	return msg
}

// safePhrase reports whether s is plain words, such as pgx's own explanations, and so cannot be a piece of
// the input.
func safePhrase(s string) bool {
	if s == "" || len(s) > 80 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" /_-", r)) {
			return false
		}
	}
	return true
}

// newLogger logs JSON lines to stderr, or a readable console format when stderr is a terminal.
func newLogger(stderr io.Writer, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, usageErr("invalid --log-level %q: use debug, info, warn or error", level)
	}
	w := stderr
	if f, ok := stderr.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

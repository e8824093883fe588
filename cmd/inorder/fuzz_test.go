package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// marker is the password the fuzz targets put in --database-url; no message may ever show it.
const marker = "hunter2"

// fuzzArgs splits a fuzzed string into arguments at NUL bytes, which a real argument cannot hold.
func fuzzArgs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// asksForHelp reports whether an argument could make the flag package answer flag.ErrHelp (-h, -help, with
// one or two dashes, with or without =value). parseFlags prints the usage on os.Stderr then, outside the
// writers the fuzz targets pass, so these inputs are left out; --help is covered by the binary's own tests.
func asksForHelp(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "h" || name == "help") {
			return true
		}
	}
	return false
}

// oneLine reports whether msg is a single line.
func oneLine(msg string) bool {
	return !strings.ContainsAny(msg, "\n\r")
}

// FuzzRunFlags checks the argument handling of `inorder run` without ever touching a database: it parses
// fuzzed arguments with the same flag registration and parseFlags as runCmd, builds the logger, and calls
// runFlags.config, which checks the flags against each other and parses --database-url (pgx.ParseConfig
// reads no network; it may read local files such as a passfile). It never calls newHandler or connect.
//
// The first argument is always --database-url=<url>, a URL or key=value string built from fuzzed parts
// around the password marker (so its parser meets every kind of byte next to the password); the fuzzed
// arguments after it may override it. The properties:
//
//   - It never panics.
//   - Every error is a usage error (errors.Is(err, errUsage), exit code 2 in realMain), and its message as
//     realMain prints it is one line: no line break.
//   - While the marker's URL is the --database-url in effect, no error message contains the marker, unless
//     the fuzzed arguments, or the user, host and rest of the URL, contain it (then a message may
//     legitimately quote another flag's value, a host or a port).
//   - A configuration that passes has a process, a table, a parsed connection config and the checked bounds.
func FuzzRunFlags(f *testing.F) {
	seeds := []struct {
		args, user, pre, post, host, rest string
		dsn                               bool
	}{
		{"--process\x00p\x00--table\x00t", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t", "u", "", "", "h:bad-port", "/db", false},
		{"--process=p\x00--table=t", "u", "", "", "h", "/db?sslmode=bogus", false},
		{"--process=p\x00--table=t", "u", "%zz", "", "h", "/db", false},
		{"--process=p\x00--table=t", "u", "?", "", "h", "/db", false},
		{"--process=p\x00--table=t", "u", "", "@x:1", "h", "/db", false},
		{"--process=p\x00--table=t", "u", "'", "", "h", "port=x", true},
		{"--process=p\x00--table=t", "u", "", "", "h", "port=x sslmode=verify-full sslrootcert=/nonexistent", true},
		{"--process=p\x00--table=t", "u", "my ", "", "db", "sslmode=disable", true},         // once echoed a piece of the password
		{"--process=p\x00--table=t", "app@srv", "", " x", "srv.example.com", "/db", false},  // once echoed a piece of the password
		{"--process=p\x00--table=t", "app@srv", "", "%zz", "srv.example.com", "/db", false}, // once echoed a piece of the password
		{"--process=p\x00--table=t", "u", "a: b", ": c", "[::1", "/db", false},
		{"--process=p\x00--table=t\x00--database-url=", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--handler-timeout=1m\x00--idle-timeout=1m", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--retry-min=2s\x00--retry-max=1s", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--checkpoint=batch\x00--start-from=later", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--batch-size=0x10\x00--poll-interval=-1s", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--log-level=", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00extra", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--", "u", "", "", "h", "/db", false},
		{"--nope\x00x", "u", "", "", "h", "/db", false},
		{"-process", "u", "", "", "h", "/db", false},
		{"--pro\ncess=p", "u", "", "", "h", "/db", false},                                    // once broke the message over lines
		{"---a\nb", "u", "", "", "h", "/db", false},                                          // once broke the message over lines
		{"--process=p\x00--table=t", "u", "", "", "h", "/db?application_name=a\nb c", false}, // once echoed a piece of the password
		{"--batch-size=99999999999999999999", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--partitions=-1", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--max-partitions=2", "u", "", "", "h", "/db", false},
		{"--process=p\x00--table=t\x00--partitions=4\x00--max-partitions=2\x00--listen", "u", "", "", "h", "/db", false},
	}
	for _, s := range seeds {
		f.Add(s.args, s.user, s.pre, s.post, s.host, s.rest, s.dsn)
	}
	f.Fuzz(func(t *testing.T, fuzzed, user, pre, post, host, rest string, dsn bool) {
		url := "postgres://" + user + ":" + pre + marker + post + "@" + host + rest
		if dsn {
			url = "user=" + user + " password=" + pre + marker + post + " host=" + host + " " + rest
		}
		args := append([]string{"--database-url=" + url}, fuzzArgs(fuzzed)...)
		if asksForHelp(args) {
			return
		}
		var rf runFlags
		fs := newFlagSet("run", io.Discard)
		rf.register(fs)
		err := parseFlags(fs, args)
		var log zerolog.Logger
		if err == nil {
			log, err = newLogger(io.Discard, rf.logLevel)
		}
		if err == nil {
			cfg, cerr := rf.config(log)
			err = cerr
			if err == nil {
				switch {
				case cfg.Process == "" || cfg.Source.Table == "" || cfg.ClientConfig.ConnConfig == nil:
					t.Fatalf("config passed without a process, table or connection: %+v", cfg)
				case cfg.BatchSize < 0 || cfg.PollInterval <= 0 || cfg.InsertLatency < 0 || cfg.RetryMin <= 0 ||
					cfg.RetryMax < cfg.RetryMin || (cfg.HandlerTimeout != 0 && cfg.HandlerTimeout >= cfg.IdleInTransactionTimeout) ||
					(cfg.HandlerTimeout != 0 && cfg.HandlerTimeout >= cfg.Lease) || cfg.ClientConfig.DatabaseTimeout <= 0 ||
					rf.partitions < 0 || rf.maxPartitions < 0 || (rf.maxPartitions > 0 && rf.partitions == 0):
					t.Fatalf("config passed with bounds out of range: %+v", cfg)
				}
				return
			}
		}
		if !errors.Is(err, errUsage) {
			t.Fatalf("args %q: error %q is not a usage error", args, err)
		}
		msg := strings.TrimPrefix(err.Error(), "usage: ")
		if !oneLine(msg) {
			t.Fatalf("args %q: message is not one line: %q", args, msg)
		}
		if rf.databaseURL.get() == url && !strings.Contains(fuzzed+user+host+rest, marker) && strings.Contains(msg, marker) {
			t.Fatalf("--database-url %q: the password shows in %q", url, msg)
		}
	})
}

// realMainCommands are the commands FuzzRealMain drives.
var realMainCommands = []string{"run", "status", "skip", "rewind", "pause", "resume", "retry", "audit", "migrate",
	"repartition", "prune", "forget"}

// FuzzRealMain drives realMain itself with a command and fuzzed arguments, followed by two invalid database
// URLs that keep it away from any database:
//
//	<command> <fuzzed args...> --database-url=postgres://x:y@h:bad-port/db --database-url=postgres://u:hunter2@h:bad-port/db
//
// A flag at the end of the fuzzed arguments may take the first URL as its value, never both, so when flag
// parsing gets there the --database-url in effect is one pgx cannot parse (a port that is not a number), and
// when it stops earlier (a positional argument, --) the command fails on the unexpected argument. Either way
// each command stops at its usage checks, before connect; the context is cancelled as well, so that a
// connection, were one ever tried, would fail at once rather than reach out. The properties:
//
//   - It never panics, and the exit code is 2 (a usage error), or 0 for `migrate --print`. Never 1: that
//     would mean the command got past its usage checks to the database.
//   - On exit code 2 stderr is exactly one line, "inorder <command>: <message>\n", and stdout is empty.
//   - Nothing written contains the password of the URL in effect, unless the fuzzed arguments do.
func FuzzRealMain(f *testing.F) {
	for _, seed := range []struct{ cmd, args string }{
		{"run", ""}, {"run", "--process=p\x00--table=t"}, {"run", "--process=p\x00--table=t\x00--process"},
		{"run", "--process=p\x00--table=t\x00--batch-size"}, {"run", "--process=p\x00--table=t\x00--"},
		{"run", "-=x"}, {"run", "---x"}, {"run", "--process=p\x00--table=t\x00--database-url=postgres://h/db\x00--instance"},
		{"status", "--process=p\x00--json"}, {"status", "stray"},
		{"skip", "--process=p\x00--reason=r"}, {"skip", "--process=p\x00--reason=r\x00--record=1\x00--actor=a"},
		{"rewind", "--process=p\x00--to-time=yesterday\x00--actor=a"},
		{"rewind", "--process=p\x00--to-record=1\x00--to-time=2024-01-01T00:00:00Z\x00--actor=a"},
		{"rewind", "--process=p\x00--to-time=2024-01-01T00:00:00Z\x00--actor=a"},
		{"pause", "--process=p\x00--actor="}, {"resume", "--process=p\x00--actor=a\x00--wait=x"},
		{"audit", "--limit=x"}, {"audit", "--json"},
		{"migrate", "--print\x00--notify=t"}, {"migrate", "--print\x00--partition-index=bookings:aggregate_id:4"},
		{"migrate", "--partition-index=a::0"}, {"migrate", ""},
		{"repartition", "--process=p\x00--partitions=0\x00--actor=a"}, {"repartition", "--process=p\x00--partitions=3\x00--actor=a"},
		{"prune", "--table=t\x00--older-than=30d"}, {"prune", "--table=t\x00--older-than=-1h"},
		{"prune", "--table=t\x00--before=2024-01-01T00:00:00Z\x00--dry-run\x00--json\x00--batch=5"},
		{"prune", "--table=t\x00--older-than=1d\x00--before=2024-01-01T00:00:00Z"}, {"prune", "--older-than=99999999999d"},
		{"forget", "--process=p"}, {"forget", "--process=p\x00--actor="},
	} {
		f.Add(uint8(slices.Index(realMainCommands, seed.cmd)), seed.args)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, which uint8, fuzzed string) {
		cmd := realMainCommands[int(which)%len(realMainCommands)]
		args := append([]string{cmd}, fuzzArgs(fuzzed)...)
		args = append(args, "--database-url=postgres://x:y@h:bad-port/db",
			"--database-url=postgres://u:"+marker+"@h:bad-port/db")
		if asksForHelp(args[1:]) {
			return
		}
		var stdout, stderr bytes.Buffer
		code := realMain(ctx, args, &stdout, &stderr)
		out, errOut := stdout.String(), stderr.String()
		if !strings.Contains(fuzzed, marker) && (strings.Contains(out, marker) || strings.Contains(errOut, marker)) {
			t.Fatalf("%q: the password shows: stdout %q, stderr %q", args, out, errOut)
		}
		switch code {
		case 0:
			if cmd != "migrate" || out == "" {
				t.Fatalf("%q: exit code 0 with stdout %q, stderr %q", args, out, errOut)
			}
		case 2:
			prefix := "inorder " + cmd + ": "
			msg, ok := strings.CutPrefix(errOut, prefix)
			if !ok || !strings.HasSuffix(msg, "\n") || out != "" {
				t.Fatalf("%q: exit code 2 with stdout %q, stderr %q", args, out, errOut)
			}
			msg = strings.TrimSuffix(msg, "\n")
			if !oneLine(msg) {
				t.Fatalf("%q: message is not one line: %q", args, errOut)
			}
		default:
			t.Fatalf("%q: exit code %d (past the usage checks): stdout %q, stderr %q", args, code, out, errOut)
		}
	})
}

// maxWrapText bounds the texts FuzzWrap tries.
const maxWrapText = 4096

// FuzzWrap checks wrap, which lays out the detail lines of `inorder status` (halt errors come from handlers
// and sinks, so any text), for any text, any indent of valid UTF-8 without a line break (the callers pass
// "" and "  "), and any width that leaves room for one rune after the indent (width >= runes(indent)+1;
// below that wrap cannot make progress and is not meant to be called). The properties:
//
//   - It never panics and returns at least one line; every line starts with indent and has at most width
//     runes, and no line but the only one is the bare indent.
//   - Words are preserved in order. A word is a strings.Fields word of text. A word longer than a line
//     (runes(indent)+runes(word) > width) is cut into pieces of exactly width-runes(indent) runes and a
//     shorter or equal remainder, each piece on a line of its own except that the remainder may be followed by
//     the next words; a cut word's pieces are the runes of the word (so an invalid byte in a cut word
//     becomes U+FFFD; words that are not cut keep their bytes). So the Fields of the lines after their indent,
//     in order, are exactly the words, with each long word replaced by its pieces.
//   - Lines are filled greedily: the first word of each line but the first would not have fit, after a
//     space, on the line before it.
//
// Texts are kept to maxWrapText bytes: the callers pass a clipped error (600 runes) or a sentence around a
// process name and record id, and wrap's cost grows with the square of a long word's length over the width.
func FuzzWrap(f *testing.F) {
	f.Add("error: webhook POST https://example.com/hook: 503 Service Unavailable: upstream timed out", "  ", 100)
	f.Add("", "", 1)
	f.Add("", "  ", 3)
	f.Add("   \t\n  ", "> ", 10)
	f.Add("a b c d e f g h i j k l m n o p", "", 1)
	f.Add("averyveryverylongwordwithoutanyspacesatall and then some", "  ", 7)
	f.Add("exactlyten exactlyten", "", 10)
	f.Add("éèêë ünïcödé ☃☃☃☃☃ 😀😀😀😀", "•", 4)
	f.Add("bad\xff\xfe\xfdbytes in\xc3 words", "  ", 4)
	f.Add("nbsp\u00a0and\u2028line\u2029separators\u0085nel", " ", 8)
	f.Add("x", "\t\u00a0", 3)
	f.Fuzz(func(t *testing.T, text, indent string, width int) {
		if !utf8.ValidString(indent) || strings.ContainsAny(indent, "\n") || len(text) > maxWrapText {
			return
		}
		ind := utf8.RuneCountInString(indent)
		if width < 0 {
			width = -(width + 1)
		}
		width = ind + 1 + width%200
		avail := width - ind

		out := wrap(text, indent, width)

		var want []string
		for _, w := range strings.Fields(text) {
			if ind+utf8.RuneCountInString(w) <= width {
				want = append(want, w)
				continue
			}
			r := []rune(w)
			for len(r) > avail {
				want = append(want, string(r[:avail]))
				r = r[avail:]
			}
			want = append(want, string(r))
		}

		lines := strings.Split(out, "\n")
		var got []string
		for i, line := range lines {
			if n := utf8.RuneCountInString(line); n > width {
				t.Fatalf("line %d has %d runes, more than the width %d: %q", i, n, width, line)
			}
			rest, ok := strings.CutPrefix(line, indent)
			if !ok {
				t.Fatalf("line %d does not start with the indent %q: %q", i, indent, line)
			}
			words := strings.Fields(rest)
			if len(words) == 0 && len(lines) > 1 {
				t.Fatalf("line %d of %d is empty: %q", i, len(lines), out)
			}
			if i > 0 && len(words) > 0 &&
				utf8.RuneCountInString(lines[i-1])+1+utf8.RuneCountInString(words[0]) <= width {
				t.Fatalf("line %d starts with %q, which fit on the line before: %q", i, words[0], out)
			}
			got = append(got, words...)
		}
		if len(got) != len(want) {
			t.Fatalf("words %q laid out as %q (words %q)", want, out, got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("word %d is %q, want %q: %q laid out as %q", i, got[i], want[i], text, out)
			}
		}
	})
}

// FuzzClip checks clip, which keeps the columns of `inorder status` and `inorder audit` within their width:
// for any string and any n >= 1 (the callers pass 12 to 600), the result has at most n runes; a string
// that fits is returned as it is; a longer one becomes its first n-1 runes followed by "…".
func FuzzClip(f *testing.F) {
	f.Add("booking_webhook", 20)
	f.Add("", 1)
	f.Add("ab", 1)
	f.Add("exactly-twenty-runes", 20)
	f.Add("☃☃☃☃☃☃", 3)
	f.Add("bad\xffbytes", 4)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 {
			n = -(n + 1)
		}
		n = 1 + n%700
		got := clip(s, n)
		if c := utf8.RuneCountInString(got); c > n {
			t.Fatalf("clip(%q, %d) = %q has %d runes", s, n, got, c)
		}
		if utf8.RuneCountInString(s) <= n {
			if got != s {
				t.Fatalf("clip(%q, %d) = %q; it fits, want it unchanged", s, n, got)
			}
			return
		}
		if want := string([]rune(s)[:n-1]) + "…"; got != want {
			t.Fatalf("clip(%q, %d) = %q, want %q", s, n, got, want)
		}
	})
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inorder-dev/inorder/internal/source"
)

// A configuration file (`inorder run --config FILE`, YAML) runs several processes in one OS process:
//
//	database-url: ${DATABASE_URL}
//	metrics-addr: :9090
//	start-from: now
//	processes:
//	  - process: booking_sms
//	    table: bookings
//	    handler: webhook
//	    webhook-url: https://sms.example.com/hooks
//	  - process: ledger_kafka
//	    table: ledger_events
//
// Its keys are the flags of `inorder run`, as on the command line. The top-level ones apply to every
// process, an entry of processes: to its own; ${VAR} in a value is read from the environment, so that
// secrets stay out of the file. For each process the settings are taken in this order, each over the one
// before: the file's top level, the process's entry, the environment (INORDER_<FLAG>), the command line.
// A key that is no flag, a value its flag refuses, a ${VAR} that is not set and a process without its
// required settings stop the start, naming the key and its line.

// fileOnly are the keys that only the file's top level may set: they are the OS process's, not one
// process's.
var fileOnly = map[string]bool{"metrics-addr": true, "log-level": true, "max-conns": true, "xmin-hold-after": true}

// configSetting is one key of the file and its value (several for a list).
type configSetting struct {
	key    string
	line   int
	values []string
}

// configFile is a parsed configuration file.
type configFile struct {
	path      string
	top       []configSetting
	processes []configEntry
}

// configEntry is one entry of processes:.
type configEntry struct {
	line     int
	settings []configSetting
}

// readConfig parses the file at path, expanding ${VAR} with lookup.
func readConfig(path string, lookup func(string) (string, bool)) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr("--config: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, usageErr("--config %s: %s", path, oneLineText(err.Error()))
	}
	cf := &configFile{path: path}
	if len(doc.Content) == 0 {
		return nil, usageErr("--config %s is empty", path)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, usageErr("--config %s line %d: the file must be a mapping of run flags and processes:", path, root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "processes" {
			s, err := cf.setting(k, v, lookup)
			if err != nil {
				return nil, err
			}
			cf.top = append(cf.top, s)
			continue
		}
		if v.Kind != yaml.SequenceNode {
			return nil, cf.errAt(v.Line, "processes must be a list of processes, each a mapping of run flags")
		}
		for _, p := range v.Content {
			if p.Kind != yaml.MappingNode {
				return nil, cf.errAt(p.Line, "each entry of processes must be a mapping of run flags")
			}
			e := configEntry{line: p.Line}
			for j := 0; j+1 < len(p.Content); j += 2 {
				pk := p.Content[j]
				if fileOnly[pk.Value] || pk.Value == "processes" {
					return nil, cf.errAt(pk.Line, "%s is for the whole file: set it at the top level", pk.Value)
				}
				s, err := cf.setting(pk, p.Content[j+1], lookup)
				if err != nil {
					return nil, err
				}
				e.settings = append(e.settings, s)
			}
			cf.processes = append(cf.processes, e)
		}
	}
	if len(cf.processes) == 0 {
		cf.processes = []configEntry{{line: root.Line}} // the top level is the one process
	}
	return cf, nil
}

// variable is a ${VAR} in a value.
var variable = regexp.MustCompile(`\$\{([^}]*)\}`)

// setting reads one key and its value: a scalar, or a list of scalars (a repeatable flag's values, or a
// list that the flag takes comma-separated).
func (cf *configFile) setting(k, v *yaml.Node, lookup func(string) (string, bool)) (configSetting, error) {
	s := configSetting{key: k.Value, line: k.Line}
	if k.Kind != yaml.ScalarNode {
		return s, cf.errAt(k.Line, "a key must be a run flag's name")
	}
	var raw []string
	switch v.Kind {
	case yaml.ScalarNode:
		raw = []string{v.Value}
	case yaml.SequenceNode:
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return s, cf.errAt(item.Line, "%s: a list may hold only plain values", s.key)
			}
			raw = append(raw, item.Value)
		}
	default:
		return s, cf.errAt(v.Line, "%s: give a value or a list of values, not a mapping", s.key)
	}
	for _, r := range raw {
		var missing, empty string
		expanded := variable.ReplaceAllStringFunc(r, func(m string) string {
			name := m[2 : len(m)-1]
			val, ok := lookup(name)
			if !ok && missing == "" {
				missing = name
			}
			if ok && val == "" && empty == "" {
				empty = name
			}
			return val
		})
		if missing != "" {
			return s, cf.errAt(k.Line, "%s: the environment variable %s is not set", s.key, missing)
		}
		if expanded == "" && empty != "" && s.key == "database-url" {
			// Blamed here, on the line that reads it, rather than on the first process that needs it.
			return s, cf.errAt(k.Line, "%s: the environment variable %s is empty", s.key, empty)
		}
		s.values = append(s.values, expanded)
	}
	return s, nil
}

func (cf *configFile) errAt(line int, format string, args ...any) error {
	return usageErr("--config %s line %d: %s", cf.path, line, fmt.Sprintf(format, args...))
}

// apply sets the settings on fs, refusing a key that is no flag (with the closest one) and a value the
// flag refuses.
func (cf *configFile) apply(fs *flag.FlagSet, settings []configSetting) error {
	for _, s := range settings {
		fl := fs.Lookup(s.key)
		if fl == nil || s.key == "config" {
			return cf.errAt(s.line, "unknown key %q%s", s.key, nearestFlag(fs, s.key))
		}
		values := s.values
		if _, repeatable := fl.Value.(*headerFlag); !repeatable && len(values) > 1 {
			values = []string{strings.Join(values, ",")}
		}
		for _, v := range values {
			if err := fs.Set(s.key, v); err != nil {
				return cf.errAt(s.line, "%s: invalid value: %s", s.key, oneLineText(strings.ReplaceAll(err.Error(), v, "…")))
			}
		}
	}
	return nil
}

// nearestFlag is ", did you mean NAME?" for the flag of fs closest to key, or "".
func nearestFlag(fs *flag.FlagSet, key string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	best := source.Nearest(key, names)
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

// processFlags builds the flags of each process of the file: its top level, the process's entry, the
// environment and the command line (args), each over the one before.
func (cf *configFile) processFlags(args []string) ([]*runFlags, error) {
	if err := cf.checkOneProcessSettings(args); err != nil {
		return nil, err
	}
	var out []*runFlags
	names := map[string]int{}
	for i, e := range cf.processes {
		fs := newFlagSet("run", io.Discard)
		f := &runFlags{}
		f.register(fs)
		if err := cf.apply(fs, cf.top); err != nil {
			return nil, err
		}
		if err := cf.apply(fs, e.settings); err != nil {
			return nil, err
		}
		if err := setFromEnv(fs, os.LookupEnv, map[string]bool{"config": true}); err != nil {
			return nil, err
		}
		if err := fs.Parse(args); err != nil { // the command line over the environment
			return nil, usageErr("%s", oneLineText(err.Error()))
		}
		if at, twice := names[f.process]; twice && f.process != "" {
			return nil, cf.errAt(e.line, "process %q is also the process of the entry at line %d", f.process, at)
		}
		names[f.process] = e.line
		if f.databaseURL.get() == "" && !f.databaseURL.set {
			// Nothing in the file names a database, and DATABASE_URL is unset or empty: the environment's
			// fault, not this entry's.
			return nil, usageErr("no database: DATABASE_URL is empty or unset, and --config %s sets no database-url", cf.path)
		}
		f.configEntry = fmt.Sprintf("--config %s, process #%d (line %d)", cf.path, i+1, e.line)
		out = append(out, f)
	}
	return out, nil
}

// inEntry prefixes a usage error of a process of a configuration file with where its entry is.
func (f *runFlags) inEntry(err error) error {
	if err == nil || f.configEntry == "" || !errors.Is(err, errUsage) {
		return err
	}
	return usageErr("%s: %s", f.configEntry, strings.TrimPrefix(err.Error(), "usage: "))
}

// oneProcessSettings are the settings that name what one process is: set in the environment or on the
// command line, they would make every process of a file alike.
var oneProcessSettings = []string{"process", "table"}

// checkOneProcessSettings refuses, for a file of more than one process, an environment variable or a
// flag that would set one process's own setting (its name, its table) for every process of the file:
// each entry says its own.
func (cf *configFile) checkOneProcessSettings(args []string) error {
	if len(cf.processes) < 2 {
		return nil
	}
	fs := newFlagSet("run", io.Discard)
	(&runFlags{}).register(fs)
	if err := fs.Parse(args); err != nil {
		return usageErr("%s", oneLineText(err.Error()))
	}
	for _, name := range oneProcessSettings {
		if v, ok := os.LookupEnv(envName(name)); ok && v != "" {
			return usageErr("%s would set the %s of every process of --config %s (%d processes): set it in each "+
				"process's entry instead, or unset it", envName(name), name, cf.path, len(cf.processes))
		}
		var given bool
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
		if given {
			return usageErr("--%s would set the %s of every process of --config %s (%d processes): set it in each "+
				"process's entry instead", name, name, cf.path, len(cf.processes))
		}
	}
	return nil
}

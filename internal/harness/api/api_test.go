package api

import (
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "write docs/api.txt from the code, when CHANGELOG.md names every identifier that went or changed")

// module is the module path of the public packages.
const module = "github.com/inorder-dev/inorder"

// public are the packages whose exported identifiers are promised (docs/promises.md): everything a user's
// program may import. The commands, the examples and internal/ are not.
var public = []string{
	"console", "cursor", "handlers", "handlers/cloudevent", "handlers/jetstream", "handlers/kafka",
	"handlers/pubsub", "handlers/rabbitmq", "handlers/redisstream", "handlers/stdout", "handlers/webhook",
	"inordertype", "lifecycle", "migrations", "ops", "processor", "processor/processortest",
	"traceparent",
}

// record is where the API is recorded, relative to this package.
const record = "../../../docs/api.txt"

// TestThePublicAPIIsRecorded lists every exported identifier of the public packages with its signature
// (a function's, a type's exported fields and methods, a constant's or variable's type) and compares the
// list with docs/api.txt: a difference fails, naming what went, changed or came. An identifier removed or
// changed without a line in CHANGELOG.md's Unreleased section naming it makes -update fail too.
func TestThePublicAPIIsRecorded(t *testing.T) {
	t.Parallel()
	got := exported(t)
	data, err := os.ReadFile(record)
	if err != nil && !*update {
		require.NoError(t, err)
	}
	want := lines(string(data))
	gone, came := diff(want, got)
	if *update {
		unsaid := unmentioned(t, gone, got)
		require.Empty(t, unsaid, "CHANGELOG.md's Unreleased section names none of these, which go or change: say so there first")
		require.NoError(t, os.WriteFile(record, []byte(strings.Join(got, "\n")+"\n"), 0o644))
		return
	}
	require.True(t, len(gone) == 0 && len(came) == 0,
		"the public API differs from docs/api.txt.\ngone or changed:\n  %s\nnew or changed:\n  %s\n"+
			"If this is on purpose, name what went or changed in CHANGELOG.md (Unreleased) and run "+
			"go test ./internal/harness/api -update", strings.Join(gone, "\n  "), strings.Join(came, "\n  "))
}

// TestAPIChangesNeedAChangelogLine: an identifier that goes unnamed in the changelog is refused by
// -update; one named there is not.
func TestAPIChangesNeedAChangelogLine(t *testing.T) {
	t.Parallel()
	changelog := "## Unreleased\n\n### Removed\n\n- `cursor.ListProcesses`: use `cursor.Read`.\n- `lifecycle/ops` is now `ops`.\n\n" +
		"## 2026-01-01\n\n- `cursor.Read`, `cursor.Processes`"
	now := []string{"func cursor.Read(...)", "method cursor.Info.Measure2(...)", "func ops.NewMetrics()"}
	unsaid := unmentionedIn(changelog, []string{"func cursor.ListProcesses(...)", "func cursor.Processes(...)",
		"method cursor.Info.Measure(...)", "func lifecycle/ops.NewMetrics()"}, now)
	require.Equal(t, []string{"func cursor.Processes(...)", "method cursor.Info.Measure(...)"}, unsaid,
		"named in an older section is not named; a package gone and named is")
	require.Equal(t, []string{"func handlers.Gone()"}, unmentionedIn("## Unreleased\n\n- `handlers` gained X.", []string{"func handlers.Gone()"},
		[]string{"func handlers.Other()"}), "a package that is still there is not a move")
	require.Equal(t, []string{"method processor.Observer.Gone(process string)"},
		unmentionedIn("## Unreleased\n\n- `processor.RetryObserver` went; `processor.Observer` has Retrying.",
			[]string{"type processor.RetryObserver", "method processor.RetryObserver.Retrying(process string, retrying bool)",
				"method processor.Observer.Gone(process string)"},
			[]string{"type processor.Observer", "method processor.Observer.Retrying(process string, retrying bool)"}),
		"a type gone and named takes its methods with it; a type that stays does not")
}

// exported lists the public packages' exported identifiers, one line each, sorted.
func exported(t *testing.T) []string {
	t.Helper()
	// The compiler's export data, which the build cache mostly has already: type-checking every dependency
	// from source takes a minute.
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}
	for _, rel := range public {
		args = append(args, module+"/"+rel)
	}
	listed, err := exec.Command("go", args...).Output()
	require.NoError(t, err, "go list -export")
	files := map[string]string{}
	for _, l := range strings.Split(string(listed), "\n") {
		if path, file, ok := strings.Cut(l, " "); ok && file != "" {
			files[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var out []string
	for _, rel := range public {
		pkg, err := imp.Import(module + "/" + rel)
		require.NoError(t, err, rel)
		qual := func(p *types.Package) string {
			if p == pkg {
				return ""
			}
			return strings.TrimPrefix(p.Path(), module+"/")
		}
		name := strings.TrimPrefix(pkg.Path(), module+"/")
		scope := pkg.Scope()
		for _, n := range scope.Names() {
			obj := scope.Lookup(n)
			if !obj.Exported() {
				continue
			}
			out = append(out, describe(name, obj, qual)...)
		}
	}
	sort.Strings(out)
	return out
}

// describe gives the lines of one package-level object: a type also has a line per exported field,
// interface method and method.
func describe(pkg string, obj types.Object, qual types.Qualifier) []string {
	id := pkg + "." + obj.Name()
	switch o := obj.(type) {
	case *types.Func:
		return []string{"func " + id + strings.TrimPrefix(types.TypeString(o.Type(), qual), "func")}
	case *types.Const:
		return []string{"const " + id + " " + types.TypeString(o.Type(), qual)}
	case *types.Var:
		return []string{"var " + id + " " + types.TypeString(o.Type(), qual)}
	case *types.TypeName:
		var lines []string
		kind := "type"
		if o.IsAlias() {
			kind = "alias"
		}
		lines = append(lines, kind+" "+id+typeParams(o, qual))
		if named, ok := o.Type().(*types.Named); ok {
			for m := range named.Methods() {
				if m.Exported() {
					lines = append(lines, "method "+id+"."+m.Name()+strings.TrimPrefix(types.TypeString(m.Type(), qual), "func"))
				}
			}
		}
		switch u := o.Type().Underlying().(type) {
		case *types.Struct:
			for f := range u.Fields() {
				if f.Exported() {
					lines = append(lines, "field "+id+"."+f.Name()+" "+types.TypeString(f.Type(), qual))
				}
			}
		case *types.Interface:
			for m := range u.Methods() {
				if m.Exported() {
					lines = append(lines, "method "+id+"."+m.Name()+strings.TrimPrefix(types.TypeString(m.Type(), qual), "func"))
				}
			}
		default:
			lines[0] += " " + types.TypeString(u, qual)
		}
		return lines
	}
	return []string{fmt.Sprintf("%T %s", obj, id)}
}

// typeParams writes a generic type's parameters.
func typeParams(o *types.TypeName, qual types.Qualifier) string {
	named, ok := o.Type().(*types.Named)
	if !ok || named.TypeParams().Len() == 0 {
		return ""
	}
	var ps []string
	for tp := range named.TypeParams().TypeParams() {
		ps = append(ps, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), qual))
	}
	return "[" + strings.Join(ps, ", ") + "]"
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// diff returns the lines of want missing from got (gone, or changed) and those of got missing from want.
func diff(want, got []string) (gone, came []string) {
	in := func(set []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range set {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	for _, l := range want {
		if !g[l] {
			gone = append(gone, l)
		}
	}
	for _, l := range got {
		if !w[l] {
			came = append(came, l)
		}
	}
	return gone, came
}

// unmentioned returns the lines of gone whose identifier CHANGELOG.md's Unreleased section does not name
// (got is the API as it is now).
func unmentioned(t *testing.T, gone, got []string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "CHANGELOG.md"))
	require.NoError(t, err)
	return unmentionedIn(string(data), gone, got)
}

// unmentionedIn is unmentioned over changelog's text. An identifier counts as named when the section names
// it (qualified by its package, or its type's), or when its whole package is gone and the section names
// the package (a package moved or removed).
func unmentionedIn(changelog string, gone, got []string) []string {
	packages, types := map[string]bool{}, map[string]bool{}
	for _, l := range got {
		id := strings.Fields(l)[1]
		packages[strings.Split(id, ".")[0]] = true
		if strings.HasPrefix(l, "type ") || strings.HasPrefix(l, "alias ") {
			types[strings.TrimRight(id, "[")] = true
		}
	}
	section := changelog
	if i := strings.Index(section, "## Unreleased"); i >= 0 {
		section = section[i+len("## Unreleased"):]
		if j := strings.Index(section, "\n## "); j >= 0 {
			section = section[:j]
		}
	}
	var out []string
	for _, l := range gone {
		id := strings.Fields(l)[1] // "func cursor.Read(...)" -> "cursor.Read(...)"
		if i := strings.IndexAny(id, "([ "); i >= 0 {
			id = id[:i]
		}
		// "cursor.Info.Measure": the changelog may name it so, or as Info.Measure.
		parts := strings.Split(id, ".")
		named := !packages[parts[0]] && strings.Contains(section, "`"+parts[0]+"`")
		// A field or method of a type that is gone is named with its type.
		if typ := strings.Join(parts[:min(2, len(parts))], "."); len(parts) == 3 && !types[typ] &&
			strings.Contains(section, "`"+typ+"`") {
			named = true
		}
		for k := range parts[:len(parts)-1] {
			if strings.Contains(section, strings.Join(parts[k:], ".")) {
				named = true
			}
		}
		if !named {
			out = append(out, l)
		}
	}
	return out
}

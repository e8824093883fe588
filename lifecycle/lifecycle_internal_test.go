package lifecycle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSignalOptsDefaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		opts        SignalOpts
		wantSignals []os.Signal
	}{
		{name: "zero", opts: SignalOpts{}, wantSignals: []os.Signal{syscall.SIGINT, syscall.SIGTERM}},
		// signal.Notify relays every signal when given none: an empty list must not reach it.
		{name: "empty signals", opts: SignalOpts{Signals: []os.Signal{}}, wantSignals: []os.Signal{syscall.SIGINT, syscall.SIGTERM}},
		{name: "given signals", opts: SignalOpts{Signals: []os.Signal{syscall.SIGUSR1}}, wantSignals: []os.Signal{syscall.SIGUSR1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.wantSignals, tt.opts.signals())
		})
	}
}

// TestAGroupHoldsNoSignal reads the code path of a Group without a signal actor: neither a Group nor its
// Config holds anything of a signal, so nothing of a Group can listen for one. (Sending a signal to the
// test binary to show it would kill the binary were the assertion false.)
func TestAGroupHoldsNoSignal(t *testing.T) {
	t.Parallel()
	signalType := reflect.TypeOf((*os.Signal)(nil)).Elem()
	for _, typ := range []reflect.Type{reflect.TypeOf(Group{}), reflect.TypeOf(Config{})} {
		require.Empty(t, signalFields(typ, typ.Name(), signalType, map[reflect.Type]bool{}),
			"%s holds a signal: a Group must listen for none unless a signal actor is added", typ)
	}
}

// signalFields returns the paths of the fields of typ, followed through structs, slices, maps, pointers
// and channels, whose type involves os.Signal. Function-typed fields (an actor) are opaque.
func signalFields(typ reflect.Type, path string, signalType reflect.Type, seen map[reflect.Type]bool) []string {
	if typ == signalType {
		return []string{path}
	}
	if seen[typ] {
		return nil
	}
	seen[typ] = true
	switch typ.Kind() {
	case reflect.Struct:
		var out []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			out = append(out, signalFields(f.Type, path+"."+f.Name, signalType, seen)...)
		}
		return out
	case reflect.Slice, reflect.Array, reflect.Pointer, reflect.Chan:
		return signalFields(typ.Elem(), path+"[]", signalType, seen)
	case reflect.Map:
		return append(signalFields(typ.Key(), path+"[key]", signalType, seen), signalFields(typ.Elem(), path+"[]", signalType, seen)...)
	}
	return nil
}

// TestOnlyTheSignalActorListensAndNothingExits reads the package's code: os.Exit is called nowhere, and
// signal.Notify only in NewSignalActor, which a program calls itself.
func TestOnlyTheSignalActorListensAndNothingExits(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var notifiers []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				switch pkg.Name + "." + sel.Sel.Name {
				case "os.Exit":
					t.Errorf("%s: %s calls os.Exit: the program owns its exit", fset.Position(sel.Pos()), fn.Name.Name)
				case "signal.Notify", "signal.NotifyContext", "signal.Ignore":
					notifiers = append(notifiers, fn.Name.Name)
				}
				return true
			})
		}
	}
	require.Equal(t, []string{"NewSignalActor"}, notifiers, "the functions that listen for signals")
}

package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxMethods bounds the methods of one type in the library: a type that does everything is one every change
// touches, and whose reader cannot tell which of its fields a step may change. Past it, the type's work
// goes to parts that each own their state (as the processor's reader, executor and waiter, and the cursor
// repository's lease, lock and position do).
const maxMethods = 40

// TestNoTypeHasMoreThanFortyMethods counts the methods declared on each type of the module's packages (not
// their tests, nor the deploy module) and names every type past maxMethods.
func TestNoTypeHasMoreThanFortyMethods(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	counts := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "deploy" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range f.Decls {
			if name := receiver(decl); name != "" {
				counts[filepath.ToSlash(dir)+"."+name]++
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, counts, "processor.Processor", "the count must see the processor")
	var over []string
	for name, n := range counts {
		if n > maxMethods {
			over = append(over, name)
		}
	}
	sort.Strings(over)
	for _, name := range over {
		t.Errorf("%s has %d methods (at most %d)", name, counts[name], maxMethods)
	}
}

// receiver returns the name of the type a method declaration belongs to, or "" for anything else.
func receiver(decl ast.Decl) string {
	fd, ok := decl.(*ast.FuncDecl)
	if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch generic := typ.(type) {
	case *ast.IndexExpr:
		typ = generic.X
	case *ast.IndexListExpr:
		typ = generic.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

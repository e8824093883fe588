package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/inorder-dev/inorder/migrations"
)

// previousVersion is the inorder binary of the version before the newest migration, built from the
// repository's history by previousBinary, once per test binary.
var previousVersion struct {
	once    sync.Once
	bin     string // the binary
	rev     string // the commit it was built from
	version int    // the newest migration it knows
	err     error
}

// previousBinary returns the inorder binary of the version just before the newest migration (the parent of
// the commit that added it), built from the repository's history, the commit it was built from, and the
// schema version it migrates to. It fails the test in one line when it cannot: a shallow clone has no such
// commit, and skipping would hide that the upgrade goes untested. The binary is kept in bin/previous/<commit>
// (bin/ is the build output git ignores), so only the first run builds it; the Go module cache makes the
// build work offline.
func previousBinary(t *testing.T) (bin, rev string, version int) {
	t.Helper()
	p := &previousVersion
	p.once.Do(func() { p.bin, p.rev, p.version, p.err = buildPrevious() })
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.bin, p.rev, p.version
}

// buildPrevious finds the commit before the newest migration and builds cmd/inorder at it (see previousBinary).
func buildPrevious() (bin, rev string, version int, err error) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return "", "", 0, err
	}
	all := migrations.All()
	if len(all) < 2 {
		return "", "", 0, errors.New("fewer than two migrations: there is no version before the newest")
	}
	newest := all[len(all)-1]
	version = all[len(all)-2].Version
	file := fmt.Sprintf("migrations/%03d_%s.sql", newest.Version, newest.Name)
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
		}
		return strings.TrimSpace(string(out)), err
	}
	unshallow := "the upgrade scenario builds the version before " + file + " from the repository's history"
	if shallow, err := git("rev-parse", "--is-shallow-repository"); err != nil {
		return "", "", 0, fmt.Errorf("%s, and git cannot read it: %v", unshallow, err)
	} else if shallow == "true" {
		return "", "", 0, fmt.Errorf("%s, which this shallow clone lacks: fetch it with `git fetch --unshallow`", unshallow)
	}
	added, err := git("log", "--diff-filter=A", "--format=%H", "--", file)
	if err != nil {
		return "", "", 0, fmt.Errorf("%s: %v", unshallow, err)
	}
	if added == "" || strings.Contains(added, "\n") {
		return "", "", 0, fmt.Errorf("%s, but no single commit adds it (%q): fetch the history with `git fetch "+
			"--unshallow`, and commit the migration", unshallow, added)
	}
	rev, err = git("rev-parse", "--verify", added+"^")
	if err != nil {
		return "", "", 0, fmt.Errorf("%s: the commit that adds it, %s, has no parent: %v", unshallow, added, err)
	}
	dir := filepath.Join(root, "bin", "previous", rev)
	bin = filepath.Join(dir, "inorder")
	if _, err := os.Stat(bin); err == nil {
		return bin, rev, version, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", 0, err
	}
	src, err := os.MkdirTemp("", "inorder-previous-")
	if err != nil {
		return "", "", 0, err
	}
	defer os.RemoveAll(src)
	// git archive | tar -x: the tree as committed, apart from the work tree and its index.
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", "", 0, err
	}
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		return "", "", 0, fmt.Errorf("export %s: tar: %v", rev, err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", "", 0, fmt.Errorf("export %s: git archive: %v: %s", rev, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", "", 0, fmt.Errorf("export %s: tar: %v: %s", rev, err, untarErr.String())
	}
	// Built into the cache directory under a name of its own, then renamed: a run that finds the binary
	// finds it whole, whichever of two runs built it.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+rev[:12], "-o", tmp, "./cmd/inorder")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", "", 0, fmt.Errorf("build inorder at %s (the version before %s): %v\n%s", rev, file, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", "", 0, err
	}
	return bin, rev, version, nil
}

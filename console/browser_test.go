package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/inorder-dev/inorder/console"
)

// browser starts a headless Chromium (Debian's package, which .ci/run installs) for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := "/usr/bin/chromium"
	if p, err := exec.LookPath("chromium"); err == nil {
		path = p
	}
	_, err := os.Stat(path)
	require.NoError(t, err, "the browser tests drive Chromium: apt-get install chromium (.ci/run does)")
	// A directory of its own for the profile and for Chromium's temporary files (which it would otherwise
	// leave in the temporary directory), removed once the browser has gone: again until it is gone, since
	// a helper process of Chromium may still write into it during the first removal (which is why it is
	// not t.TempDir, which fails the test then).
	// Short names: Chromium's socket path in it must stay within the 108 bytes of a Unix socket's.
	dir, err := os.MkdirTemp("", "inorder-chromium-")
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Eventually(t, func() bool {
			_ = os.RemoveAll(dir)
			_, err := os.Lstat(dir)
			return os.IsNotExist(err)
		}, 10*time.Second, 50*time.Millisecond, "Chromium's directory %s is removed", dir)
	})
	profile, tmp := filepath.Join(dir, "profile"), filepath.Join(dir, "t")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.Env("TMPDIR="+tmp),
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // as root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 720),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancel()
	})
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	require.NoError(t, chromedp.Run(ctx)) // starts the browser
	return ctx
}

// TestOperatorSkipsAHaltedRecordInTheBrowser is the night on call: a halted stream shows on the overview;
// the operator signs in, opens it, skips the halted record with a reason; the stream resumes and the
// audit row shows on the page.
// liveText reads the text of the part of a page that refreshes itself, in one script.
const liveText = `document.getElementById("live").innerText`

func TestOperatorSkipsAHaltedRecordInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.serve(t, console.Config{Token: token, AllowActions: true, RefreshInterval: 200 * time.Millisecond})
	ctx := browser(t)

	var overview string
	var shot []byte
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#signin`, chromedp.ByID),
		chromedp.SendKeys(`input[name=console_token]`, token, chromedp.ByQuery),
		chromedp.Click(`#signin`, chromedp.ByID),
		// The page replaces #live every 200ms: what is inside it is read and clicked in one script each,
		// never through a node that a refresh may have replaced since it was found.
		chromedp.WaitVisible(`body[data-refresh]`, chromedp.ByQuery), // the overview, past the sign-in's navigation
		chromedp.Poll(`!!document.querySelector('#live a[href="./process/payments"]')`, nil),
		chromedp.Evaluate(liveText, &overview),
		chromedp.FullScreenshot(&shot, 100),
	))
	require.Contains(t, overview, "payments")
	require.Contains(t, overview, "halted")
	if out := os.Getenv("INORDER_CONSOLE_SCREENSHOT"); out != "" {
		// make screenshot: the README's picture of the overview, taken here.
		require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
		require.NoError(t, os.WriteFile(out, shot, 0o644))
	}

	var halted string
	require.NoError(t, chromedp.Run(ctx,
		// Clicked once the script has returned, so that the navigation cannot cut its answer off.
		chromedp.Evaluate(`setTimeout(function(){document.querySelector('#live a[href="./process/payments"]').click()}, 0)`, nil),
		chromedp.WaitVisible(`#skip`, chromedp.ByID),
		chromedp.Poll(`document.getElementById("live").innerText.includes("Halted on record")`, nil),
		chromedp.Evaluate(liveText, &halted),
		chromedp.SendKeys(`form[action$="/action/skip"] input[name=actor]`, "ada", chromedp.ByQuery),
		chromedp.SendKeys(`form[action$="/action/skip"] input[name=reason]`, "card declined for good; refunded by hand", chromedp.ByQuery),
		chromedp.Click(`#skip`, chromedp.ByID),
		// Back on the process page, which refreshes until the stream has gone on past the record.
		chromedp.WaitVisible(`.flash`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#audit").innerText.includes("card declined for good; refunded by hand")`, nil),
		chromedp.Poll(`!document.querySelector("#live .s-halted")`, nil),
	))
	require.Contains(t, halted, "Halted on record 3")
	require.Contains(t, halted, "payments API answered 422: card_declined")
	require.Contains(t, halted, "inorder skip --process payments --record 3 --reason '...'", "the command to copy, beside the form")

	var audit string
	require.NoError(t, chromedp.Run(ctx, chromedp.Text(`#audit`, &audit, chromedp.ByID)))
	require.Contains(t, audit, "skip")
	require.Contains(t, audit, "ada (console)")
	require.Eventually(t, func() bool { return b.h.count() == 4 }, 20*time.Second, 10*time.Millisecond,
		"records 1, 2, 4 and 5 delivered: the stream resumed past the skipped record")
}

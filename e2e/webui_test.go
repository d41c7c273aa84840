package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/slicerd/slicerd/bench/loadshift"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// updateScreenshots, set to 1, makes TestWebUI write the job page's
// screenshots into docs/ (linked from README.md and docs/operations.md).
const updateScreenshots = "SLICERD_UPDATE_SCREENSHOTS"

// chromium finds the browser the web UI test drives: $SLICERD_CHROMIUM, or
// Debian's chromium, which scripts/browser.sh installs (scripts/test.sh runs
// it). Without one the test is skipped, except in CI, where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLICERD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium to drive: run scripts/browser.sh (it installs Debian's chromium) or set SLICERD_CHROMIUM"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestWebUI runs slicerd with its web UI, three kvserver tasks reporting
// load and a Clerk offering it, opens the job's page in headless Chromium,
// and checks that the heatmap, the load per task, the decision history and
// a "why" answer show the live job, each task in one colour in the table,
// the assignment strip and its legend; then kills a task and checks that
// the page follows: the task leaves the table, a task-failed decision
// enters the history and is marked on the heatmap, and the "why" answer
// names the key's new task. Loaded again, the page gives the survivors
// the colours they had. A drained task reads as drained, and its drain is
// marked on the heatmap. Bad input (a key that is not hex, an unknown job,
// a name that is not a job's) gets a message on the page, and a job that
// cannot be read shows no heatmap.
func TestWebUI(t *testing.T) {
	browser := chromium(t)
	node := startSlicerd(t, "slicerd-0", "--data-dir", t.TempDir(), "--rebalance-interval", "2s", "--ui-addr", "127.0.0.1:0")
	var started struct {
		UI string `json:"ui_addr"`
	}
	if err := json.Unmarshal([]byte(node.waitLine(time.Second, `"msg":"slicerd started"`)), &started); err != nil || started.UI == "" {
		t.Fatalf("no ui_addr in the start line: %v", err)
	}
	ui := "http://" + started.UI + "/ui/"

	tasks := map[string]*kvTask{}
	for i := range 3 {
		name := fmt.Sprintf("kv-%d", i)
		tasks[name] = startKVReporting(t, name, node.gossipAddr, "1s")
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over all tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == 3
	})
	cfg := loadshift.DefaultConfig()
	cfg.Rate, cfg.Workers = 300, 8
	d, err := loadshift.NewDriver(cfg, ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(context.Background())
	ddone := make(chan error, 1)
	go func() { ddone <- d.Run(dctx) }()
	defer func() { dcancel(); <-ddone }()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1800), chromedp.Flag("lang", "en-US"))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// The first run starts the browser, which lives as long as that
	// run's context: bctx, without a timeout. Later runs have one each.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// evalBool and evalString evaluate a JavaScript expression on the page.
	evalBool := func(expr string) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	evalString := func(expr string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(`+expr+`)`))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return v
	}
	// waitPage waits until expr, evaluated on the page, is true.
	waitPage := func(timeout time.Duration, what, expr string) {
		t.Helper()
		testwait.Until(t, timeout, what, func() bool { return evalBool(expr) })
	}
	// ask submits the "why" form, as a person would.
	ask := func(key, enc string) {
		t.Helper()
		evalBool(fmt.Sprintf(`(() => {
			document.querySelector("#why-form input[value=%s]").click();
			document.querySelector("#why-key").value = %q;
			document.querySelector("#why-form button[type=submit]").click();
			return true;
		})()`, enc, key))
	}
	screenshot := func() []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil || len(png) == 0 {
			t.Fatalf("screenshot: %v (%d bytes)", err, len(png))
		}
		return png
	}

	// The jobs page lists kv.
	run("open the jobs page", chromedp.Navigate(ui))
	waitPage(10*time.Second, "the jobs page to list kv", `!!document.querySelector('#jobs a[href="?job=kv"]')`)

	// The job page, with live data in every part.
	run("open the job page", chromedp.Navigate(ui+"?job=kv"))
	const tasksShown = `[...document.querySelectorAll("#tasks tbody tr")].map(r => r.dataset.task)`
	waitPage(30*time.Second, "the page to show each task with its load", `(() => {
		const rows = [...document.querySelectorAll("#tasks tbody tr")];
		return rows.length === 3 && rows.some(r => parseFloat(r.cells[2].firstChild.textContent) > 0) &&
			document.querySelectorAll("#strip rect").length >= 3;
	})()`)
	// A few samples (one every 5 s), so the heatmap shows load over time.
	waitPage(60*time.Second, "the heatmap to show four load samples", `/^([4-9]|\d\d+) samples, one every .* the job's load is [1-9]/.test(document.querySelector("#heat-summary").textContent)`)
	waitPage(10*time.Second, "the decision history", `document.querySelector("#history tbody tr[data-cause=initial]") !== null`)
	if !evalBool(`(() => {
		const c = document.querySelector("#heatmap"), d = c.getContext("2d").getImageData(c.width - 1, 0, 1, c.height).data;
		for (let i = 0; i < d.length; i += 4) if (d[i] !== 233) return true; // not the no-sample grey
		return false;
	})()`) {
		t.Error("the heatmap's newest column is not painted")
	}

	// Each task has its own colour, the same in the table, the strip and
	// its legend; the strip draws runs of slices, each named on hover.
	const coloursShown = `Object.fromEntries([...document.querySelectorAll("#tasks tbody tr")].map(r =>
		[r.dataset.task, getComputedStyle(r.querySelector(".swatch")).backgroundColor]))`
	coloursBefore := evalString(coloursShown)
	if !evalBool(`(() => {
		const c = ` + coloursShown + `;
		if (new Set(Object.values(c)).size !== 3) return false;
		const segs = [...document.querySelectorAll("#strip g[data-task]")];
		const legend = [...document.querySelectorAll("#strip-legend li[data-task]")];
		return segs.length > 0 && segs.every(g => getComputedStyle(g.querySelector("rect")).fill === c[g.dataset.task] &&
				/^kv-\d[\s\S]*\[0x[0-9a-f]+, 0x[0-9a-f]+\)[\s\S]*slices?, /.test(g.querySelector("title").textContent)) &&
			legend.length === 3 && legend.every(li => getComputedStyle(li.querySelector(".swatch")).backgroundColor === c[li.dataset.task]) &&
			Math.abs(legend.reduce((a, li) => a + parseFloat(li.querySelector(".share").textContent), 0) - 100) < 0.5 &&
			// One segment per run of slices on the same task (redundancy 1).
			(m => !!m && segs.length === +m[2] && +m[2] <= +m[1])(/(\d+) slices in (\d+) segments?/.exec(document.querySelector("#strip-legend").textContent));
	})()`) {
		t.Errorf("task colours, strip and legend disagree: colours %s, strip %s, legend %s", coloursBefore,
			evalString(`[...document.querySelectorAll("#strip g[data-task]")].slice(0, 5).map(g => g.dataset.task + " " + getComputedStyle(g.querySelector("rect")).fill + " " + g.textContent).join("; ")`),
			text("#strip-legend"))
	}
	if !evalBool(`[...document.querySelectorAll("#tasks tbody td[data-state]")].every(td => td.dataset.state === "live" && td.textContent === "live")`) {
		t.Errorf("tasks not shown as live: %s", text("#tasks tbody"))
	}
	// The job's first assignment is marked on the heatmap's time axis.
	waitPage(10*time.Second, "a mark for the initial decision", `(() => {
		const g = document.querySelector("#marks g[data-cause=initial][data-kind=membership]");
		return !!g && !!g.querySelector("line.line") && /initial/.test(g.querySelector("title").textContent);
	})()`)

	// Why is key-000 there?
	ask("key-000", "text")
	waitPage(10*time.Second, "the why answer", `/kv-\d/.test((document.querySelector("#why-result [data-why=tasks]") || {}).textContent || "")`)
	owner := strings.Fields(text("#why-result [data-why=tasks]"))[0]
	t.Logf("key-000 is on %s; the page shows tasks %s", owner, text("#tasks tbody"))
	before := screenshot()

	// Kill the task that serves key-000: the page follows.
	samples := text("#heat-summary")
	victim := tasks[owner]
	victim.signal(syscall.SIGKILL)
	victim.wait(10 * time.Second)
	waitPage(45*time.Second, owner+" to leave the per-task loads", fmt.Sprintf(`!%s.includes(%q) && %s.length === 2`, tasksShown, owner, tasksShown))
	// Load decisions may follow it within a refresh, so it need not be
	// the newest by the time the page is read.
	waitPage(10*time.Second, "a task-failed decision naming it in the history", fmt.Sprintf(`[...document.querySelectorAll("#history tbody tr[data-cause=task-failed]")].some(r => r.textContent.includes(%q))`, owner))
	waitPage(10*time.Second, "the why answer to name the key's new task", fmt.Sprintf(`(() => {
		const s = (document.querySelector("#why-result [data-why=tasks]") || {}).textContent || "";
		return /kv-\d/.test(s) && !s.includes(%q);
	})()`, owner))
	// The failure is marked on the heatmap, as a membership change.
	waitPage(10*time.Second, "a mark for the failure on the heatmap", fmt.Sprintf(`[...document.querySelectorAll("#marks g[data-cause=task-failed][data-kind=membership]")].some(g =>
		g.querySelector("line.line") && g.querySelector("title").textContent.includes(%q))`, owner))
	// Two more samples, so the heatmap shows the load after the failure.
	waitPage(30*time.Second, "two more load samples", fmt.Sprintf(`parseInt(document.querySelector("#heat-summary").textContent, 10) >= %d`,
		leadingInt(samples)+2))
	after := screenshot()
	if os.Getenv(updateScreenshots) == "1" && !secure {
		for name, png := range map[string][]byte{"ui-job-before.png": before, "ui-job-after.png": after} {
			if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote docs/ui-job-before.png and docs/ui-job-after.png")
	}

	// Readable in a narrow window: nothing wider than the screen but the
	// tables, which scroll inside their own boxes.
	run("narrow the window", chromedp.EmulateViewport(360, 800))
	waitPage(10*time.Second, "the page to fit a narrow window", `document.documentElement.scrollWidth <= window.innerWidth`)
	run("widen the window", chromedp.EmulateViewport(1280, 1800))

	// A task's colour comes from its name: the survivors keep theirs when
	// the page is loaded again without the failed task.
	run("load the job page again", chromedp.Navigate(ui+"?job=kv"))
	waitPage(30*time.Second, "the page to show the two survivors", tasksShown+`.length === 2`)
	var colBefore, colAfter map[string]string
	if err := json.Unmarshal([]byte(coloursBefore), &colBefore); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(evalString(coloursShown)), &colAfter); err != nil {
		t.Fatal(err)
	}
	var survivors []string
	for task, c := range colAfter {
		survivors = append(survivors, task)
		if colBefore[task] != c {
			t.Errorf("%s was %s before %s failed and is %s after a reload", task, colBefore[task], owner, c)
		}
	}

	// A drained task reads as drained, and the drain is marked on the heatmap.
	slices.Sort(survivors)
	drained := survivors[0]
	if code, out := runSlicerd(t, "task", "drain", "--addr", node.rpcAddr, "kv", drained); code != 0 {
		t.Fatalf("task drain: exit %d:\n%s", code, out)
	}
	waitPage(30*time.Second, drained+" to read as drained", fmt.Sprintf(`(() => {
		const td = document.querySelector('#tasks tbody tr[data-task=%q] td[data-state]');
		return !!td && td.dataset.state === "drained" && td.textContent === "drained — no keys";
	})()`, drained))
	waitPage(10*time.Second, "a drain mark on the heatmap", fmt.Sprintf(`[...document.querySelectorAll("#marks g[data-kind=drain]")].some(g =>
		g.querySelector("line.line") && g.querySelector("title").textContent.includes(%q))`, drained))
	if code, out := runSlicerd(t, "task", "undrain", "--addr", node.rpcAddr, "kv", drained); code != 0 {
		t.Fatalf("task undrain: exit %d:\n%s", code, out)
	}

	// Bad input: a key that is not hex, an unknown job and a name that is
	// not a job's: a message, a way back to the jobs, and no heatmap.
	ask("zz", "hex")
	waitPage(10*time.Second, "a message that the key is not hex", `/"zz" is not valid hex/.test(document.querySelector("#why-result").textContent)`)
	for _, c := range []struct{ path, sel, re string }{
		{"nope", "#error [data-error=no-job]", `/^No job named “nope”\.$/`},
		{"?job=Not+a+job", "#error [data-error=bad-job]", `/“Not a job” is not a valid job name/`},
	} {
		path := c.path
		run("open "+path, chromedp.Navigate(ui+path))
		waitPage(10*time.Second, "a message for "+path, fmt.Sprintf(`(() => {
			const e = document.querySelector(%q);
			return !!e && %s.test(e.textContent) && !!document.querySelector('#error a[href="./"]');
		})()`, c.sel, c.re))
		if !evalBool(`document.querySelector("#job-view").hidden && document.querySelector("#job-view").getClientRects().length === 0`) {
			t.Errorf("%s: the job's view (its heatmap) is shown", path)
		}
	}
}

// leadingInt is the number a text starts with ("4 samples, ..."), or 0.
func leadingInt(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = 10*n + int(c-'0')
	}
	return n
}

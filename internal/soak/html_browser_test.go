package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// chromium finds a Chromium to render the page with: the test is skipped
// without one unless HARMLESS_REQUIRE_CHROMIUM=1 says it must run.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("HARMLESS_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("HARMLESS_REQUIRE_CHROMIUM=1 but no chromium on PATH")
	}
	t.Skip("no chromium on PATH (set HARMLESS_REQUIRE_CHROMIUM=1 to fail instead)")
	return ""
}

// runChromium runs a headless Chromium on the page with extra flags and
// returns its standard output. Every run gets its own profile and no
// network chatter, so it touches nothing outside the test.
func runChromium(t *testing.T, bin, page string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(),
	}
	args = append(append(args, extra...), "file://"+page)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestHTMLRendersInChromium renders a report with a timeline, fault
// windows and a wrong event in a real browser, and checks the rendered DOM
// holds both charts and the visualisation, and that the screenshot shows
// the charts' lines and shading rather than a blank page.
func TestHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, []byte(writeHTML(t, testReport(t))), 0o644); err != nil {
		t.Fatal(err)
	}

	dom := string(runChromium(t, bin, page, "--dump-dom"))
	for _, id := range []string{"chart-throughput", "chart-latency"} {
		re := regexp.MustCompile(`<img class="chart" id="` + id + `"[^>]*src="data:image/svg\+xml;base64,`)
		if !re.MatchString(dom) {
			t.Errorf("rendered DOM has no inline SVG image %s", id)
		}
	}
	for _, want := range []string{`<iframe class="porcupine"`, `id="verdict"`, `id="anomaly-1"`, `id="anomaly-2"`, `id="fault-schedule"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %s", want)
		}
	}
	if !strings.Contains(dom, "<td>failover</td><td>hard-kill failover from node1") {
		t.Error("rendered DOM lacks the failover's window in the fault schedule")
	}
	if strings.Contains(dom, "<h1>injected</h1>") {
		t.Error("an error string became markup in the rendered DOM")
	}

	shot := filepath.Join(dir, "report.png")
	runChromium(t, bin, page, "--screenshot="+shot, "--window-size=1280,2000", "--hide-scrollbars")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if got := img.Bounds().Size(); got != (image.Point{X: 1280, Y: 2000}) {
		t.Fatalf("screenshot is %v, want 1280x2000", got)
	}

	st := screenshotStats(img)
	t.Logf("screenshot: %d distinct colours, %.1f%% not white; line pixels %v; shading pixels %v",
		st.distinct, 100*st.nonWhite, st.lines, st.shades)
	if st.distinct < 200 || st.nonWhite < 0.05 {
		t.Errorf("screenshot looks blank: %d distinct colours, %.1f%% not white", st.distinct, 100*st.nonWhite)
	}
	// Every series colour and the three fault kinds' shading (db-sleep,
	// kill, failover), as drawn on white, must show: the charts were
	// decoded and painted.
	for i, n := range st.lines {
		if n < 500 {
			t.Errorf("series colour %v has %d pixels on screen, want a drawn line", seriesColors[i], n)
		}
	}
	for i, n := range st.shades {
		if n < 500 {
			t.Errorf("fault shading %v has %d pixels on screen, want a shaded window", faultColors[i], n)
		}
	}
	if out := os.Getenv("HARMLESS_SOAK_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Errorf("keeping the screenshot: %v", err)
		}
	}
}

type shotStats struct {
	distinct int
	nonWhite float64
	// lines counts pixels near each of the first three series colours;
	// shades near each of the first three fault colours over white.
	lines  [3]int
	shades [3]int
}

func screenshotStats(img image.Image) shotStats {
	var st shotStats
	seen := map[color.RGBA]bool{}
	var nonWhite, all int
	var shadeRGB [3]color.RGBA
	for i := range shadeRGB {
		shadeRGB[i] = overWhite(faultColors[i])
	}
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y++ {
		for x := bnd.Min.X; x < bnd.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			seen[c] = true
			all++
			if c.R < 250 || c.G < 250 || c.B < 250 {
				nonWhite++
			}
			for i := range st.lines {
				if near(c, seriesColors[i], 24) {
					st.lines[i]++
				}
			}
			for i := range st.shades {
				if near(c, shadeRGB[i], 6) {
					st.shades[i]++
				}
			}
		}
	}
	st.distinct = len(seen)
	st.nonWhite = float64(nonWhite) / float64(all)
	return st
}

// overWhite is what a translucent colour looks like painted on white.
func overWhite(c color.NRGBA) color.RGBA {
	mix := func(v uint8) uint8 { return uint8((int(v)*int(c.A) + 255*(255-int(c.A))) / 255) }
	return color.RGBA{R: mix(c.R), G: mix(c.G), B: mix(c.B), A: 0xff}
}

func near(a, b color.RGBA, tol int) bool {
	d := func(x, y uint8) int { return max(int(x)-int(y), int(y)-int(x)) }
	return d(a.R, b.R) <= tol && d(a.G, b.G) <= tol && d(a.B, b.B) <= tol
}

// devtools drives a headless Chromium over the DevTools protocol on a pipe
// (--remote-debugging-pipe): commands go to its file descriptor 3, answers
// and events come from its descriptor 4, each a JSON object ended by a NUL
// byte. A pipe needs no port and no WebSocket library, and dies with the
// browser.
type devtools struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpMessage
	// events holds every event received, in order, and changed is closed
	// (and replaced) whenever one arrives or the pipe ends, so a waiter
	// can scan them all and sleep only until the next.
	events  []cdpMessage
	changed chan struct{}
	closed  error
}

// cdpMessage is a command's answer or an event.
type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startDevtools starts a headless Chromium on about:blank with the same
// isolation as runChromium, and stops it when the test ends.
func startDevtools(t *testing.T, bin string) *devtools {
	t.Helper()
	// Chromium reads commands from its fd 3 and writes to its fd 4.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{cmdR, outW}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	cmdR.Close()
	outW.Close()
	d := &devtools{t: t, cmd: cmd, in: cmdW, pending: map[int]chan cdpMessage{}, changed: make(chan struct{})}
	done := make(chan struct{})
	go d.read(outR, done)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := d.call(ctx, "", "Browser.close", nil); err != nil {
			cmd.Process.Kill()
		}
		cmdW.Close()
		select {
		case <-done:
		case <-ctx.Done():
			cmd.Process.Kill() // closed but never gone: its pipe is still open
			<-done
		}
		cmd.Wait()
		if t.Failed() {
			t.Logf("chromium's stderr:\n%s", stderr.Bytes())
		}
	})
	return d
}

// read dispatches what Chromium writes until the pipe ends.
func (d *devtools) read(r io.ReadCloser, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		b, err := br.ReadBytes(0)
		if err != nil {
			d.mu.Lock()
			d.closed = fmt.Errorf("devtools pipe: %w", err)
			for id, ch := range d.pending {
				close(ch)
				delete(d.pending, id)
			}
			close(d.changed)
			d.changed = make(chan struct{})
			d.mu.Unlock()
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(b[:len(b)-1], &m); err != nil {
			continue // not one of ours to understand
		}
		d.mu.Lock()
		if m.ID != 0 {
			if ch, ok := d.pending[m.ID]; ok {
				ch <- m
				delete(d.pending, m.ID)
			}
		} else {
			d.events = append(d.events, m)
			close(d.changed)
			d.changed = make(chan struct{})
		}
		d.mu.Unlock()
	}
}

// call sends a command to a session ("" for the browser) and returns its
// result.
func (d *devtools) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	ch := make(chan cdpMessage, 1)
	d.mu.Lock()
	if d.closed != nil {
		d.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, d.closed)
	}
	d.nextID++
	id := d.nextID
	d.pending[id] = ch
	d.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if _, err := d.in.Write(append(b, 0)); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: chromium closed the pipe", method)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// must is call for a test: a failed command fails the test.
func (d *devtools) must(ctx context.Context, session, method string, params any) json.RawMessage {
	d.t.Helper()
	res, err := d.call(ctx, session, method, params)
	if err != nil {
		d.t.Fatal(err)
	}
	return res
}

// waitEvent returns the first event received (since the start) of method
// that match accepts, waiting for it if need be.
func (d *devtools) waitEvent(ctx context.Context, method string, match func(cdpMessage) bool) cdpMessage {
	d.t.Helper()
	for {
		d.mu.Lock()
		for _, m := range d.events {
			if m.Method == method && (match == nil || match(m)) {
				d.mu.Unlock()
				return m
			}
		}
		changed, closed := d.changed, d.closed
		d.mu.Unlock()
		if closed != nil {
			d.t.Fatalf("waiting for %s: %v", method, closed)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			d.t.Fatalf("waiting for %s: %v", method, ctx.Err())
		}
	}
}

// eval evaluates a JavaScript expression in a session's page, or in one
// of its execution contexts if contextID is not 0, awaiting a promise,
// and decodes its value into v.
func (d *devtools) eval(ctx context.Context, session string, contextID int, expr string, v any) {
	d.t.Helper()
	params := map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}
	if contextID != 0 {
		params["contextId"] = contextID
	}
	res, err := d.call(ctx, session, "Runtime.evaluate", params)
	if err != nil {
		d.t.Fatalf("evaluating %.60q: %v", expr, err)
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		d.t.Fatalf("evaluating %.60q: %v", expr, err)
	}
	if r.ExceptionDetails != nil {
		d.t.Fatalf("evaluating %.60q: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if v != nil && len(r.Result.Value) > 0 {
		if err := json.Unmarshal(r.Result.Value, v); err != nil {
			d.t.Fatalf("evaluating %.60q: decoding %s: %v", expr, r.Result.Value, err)
		}
	}
}

// TestHTMLHostileInChromium opens, in a real browser, a report whose
// implementation wrote markup in its error, moves the mouse over each
// delivery of porcupine's visualisation so its tooltip shows the error,
// and checks the error showed as text, that none of its script ran and
// that no request left the page: a local server the markup points at
// must see none. Then it writes such markup into both documents itself,
// as an escaping bug would, and checks their policy stops it all the same.
func TestHTMLHostileInChromium(t *testing.T) {
	bin := chromium(t)
	var (
		mu       sync.Mutex
		requests []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	// Were it markup, the error would mark the document from an inline
	// handler and a script, and call the server from both and from an
	// image.
	mark := func(v string) string {
		return `document.documentElement.setAttribute('data-pwned','` + v + `');fetch('` + srv.URL + `/` + v + `')`
	}
	text := `<img src=x onerror="` + mark("onerror") + `"><img src="` + srv.URL + `/img">` +
		`</script><script>` + mark("script") + `</script>`

	page := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(page, []byte(writeHTML(t, hostileReport(t, text))), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d := startDevtools(t, bin)
	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := json.Unmarshal(d.must(ctx, "", "Target.getTargets", nil), &targets); err != nil {
		t.Fatal(err)
	}
	var pageTarget string
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			pageTarget = ti.TargetID
		}
	}
	if pageTarget == "" {
		t.Fatalf("chromium has no page: %+v", targets)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(d.must(ctx, "", "Target.attachToTarget", map[string]any{"targetId": pageTarget, "flatten": true}), &attached); err != nil {
		t.Fatal(err)
	}
	top := attached.SessionID
	// The sandboxed visualisation runs in a process of its own: attaching
	// to the page's frames as they come gives it a session too.
	d.must(ctx, top, "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": false, "flatten": true})
	d.must(ctx, top, "Page.enable", nil)
	d.must(ctx, top, "Page.navigate", map[string]any{"url": "file://" + page})
	// The page's load event waits for its frames': porcupine has drawn.
	d.waitEvent(ctx, "Page.loadEventFired", func(m cdpMessage) bool { return m.SessionID == top })

	// Open the visualisation and let the page draw it where it now is:
	// the browser routes the mouse to a frame by what was last drawn.
	var frame struct{ X, Y float64 }
	d.eval(ctx, top, 0, `(async () => {
		const f = document.querySelector('iframe.porcupine')
		f.closest('details').open = true
		f.scrollIntoView()
		await `+twoFrames+`
		const r = f.getBoundingClientRect()
		return {x: r.x + f.clientLeft, y: r.y + f.clientTop}
	})()`, &frame)
	ev := d.waitEvent(ctx, "Target.attachedToTarget", func(m cdpMessage) bool {
		return m.SessionID == top && strings.Contains(string(m.Params), `"type":"iframe"`)
	})
	var child struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(ev.Params, &child); err != nil {
		t.Fatal(err)
	}
	vis := child.SessionID

	// Hover each delivery with the mouse, as a reader would, and read
	// the tooltip.
	var targetsAt [][2]float64
	d.eval(ctx, vis, 0, `(async () => {
		await `+twoFrames+`
		return [...document.querySelectorAll('rect.target-rect')].map(r => {
			const b = r.getBoundingClientRect()
			return [b.x + b.width / 2, b.y + b.height / 2]
		})
	})()`, &targetsAt)
	if len(targetsAt) != 3 {
		t.Fatalf("visualisation has %d deliveries to hover, want 3", len(targetsAt))
	}
	move := func(x, y float64) {
		d.must(ctx, top, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": x, "y": y, "button": "none"})
	}
	shown := false
	for i, at := range targetsAt {
		// The browser answers a move once the page's process has it, not
		// the frame's: the tooltip is read once the delivery's own
		// listener for the move, added after porcupine's, has run.
		d.eval(ctx, vis, 0, fmt.Sprintf(`(() => {
			const r = document.querySelectorAll('rect.target-rect')[%d]
			window.moved = new Promise(done => r.addEventListener('mousemove', () => done(true), {once: true}))
		})()`, i), nil)
		// A move the browser routed by a drawing older than the open
		// visualisation misses it: the move is made again, a pixel
		// aside, until one reached the delivery within two of the
		// frame's drawings.
		for try := 0; ; try++ {
			if try == 20 {
				t.Fatalf("20 moves of the mouse to the delivery at %v (frame at %+v) never reached it", at, frame)
			}
			// From the frame's corner, where nothing is, so the tooltip of
			// the delivery before is hidden and does not cover this one.
			move(frame.X+1, frame.Y+1)
			move(frame.X+at[0]+float64(try%3), frame.Y+at[1])
			var reached bool
			d.eval(ctx, vis, 0, `Promise.race([window.moved, `+twoFrames+`.then(() => false)])`, &reached)
			if reached {
				if try > 0 {
					t.Logf("the mouse reached the delivery at %v on move %d", at, try+1)
				}
				break
			}
		}
		var tip struct {
			Display, Text string
		}
		d.eval(ctx, vis, 0, `(() => {
			const t = document.querySelector('.tooltip')
			return {display: t.style.display, text: t.textContent}
		})()`, &tip)
		if tip.Display != "block" {
			t.Errorf("hovering the delivery at %v shows no tooltip (display %q)", at, tip.Display)
		}
		shown = shown || strings.Contains(tip.Text, text)
	}
	if !shown {
		t.Errorf("no tooltip showed the error as text, %q", text)
	}

	// Markup that slipped through escaping: the policy must stop it.
	for _, s := range []string{top, vis} {
		d.eval(ctx, s, 0, `document.body.insertAdjacentHTML('beforeend', `+jsString(
			`<img src=x onerror="`+mark("slipped-onerror")+`"><img src="`+srv.URL+`/slipped-img">`+
				`<iframe srcdoc="<script>parent.document.documentElement.setAttribute('data-pwned','srcdoc')</script>"></iframe>`)+`)`, nil)
	}

	// Images started now, on the URLs the markup used, end after those
	// the markup started earlier (Chromium serves a URL's images in the
	// order they asked): once they have, the markup's handlers have run,
	// if anything let them, and its requests have been sent.
	for _, s := range []string{top, vis} {
		d.eval(ctx, s, 0, `Promise.all(['x', `+jsString(srv.URL+"/flush")+`].map(src => new Promise(done => {
			const i = new Image()
			i.onload = i.onerror = done
			i.src = src
		})))`, nil)
		var pwned *string
		d.eval(ctx, s, 0, `document.documentElement.getAttribute('data-pwned')`, &pwned)
		if pwned != nil {
			t.Errorf("a script the implementation wrote ran (it marked %q)", *pwned)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(requests) > 0 {
		t.Errorf("the report made %d requests, want none: %q", len(requests), requests)
	}
}

// twoFrames is a JavaScript promise that resolves once the document has
// been drawn twice from now: what changed before is on screen.
const twoFrames = `new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))`

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

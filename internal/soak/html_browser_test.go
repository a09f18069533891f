package soak

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

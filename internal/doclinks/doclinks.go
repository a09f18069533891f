// Package doclinks checks the relative links of Markdown pages as GitHub
// resolves them: the target file or directory exists, and an anchor names
// a heading of the target page by its GitHub slug (or, on any other file,
// a line it has: #L12, #L12-L20).
//
// Its test checks every Markdown page of the repository (README.md,
// docs/*.md, examples/*/README.md, ...), so that a renamed heading or a
// moved file cannot leave a link that leads nowhere.
package doclinks

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Link is one link of a Markdown page.
type Link struct {
	File   string // the page, as given to Check
	Line   int    // 1-based
	Target string // as written: path, path#anchor or #anchor
}

func (l Link) String() string { return fmt.Sprintf("%s:%d: %s", l.File, l.Line, l.Target) }

// Problem is a link that does not resolve, and why.
type Problem struct {
	Link
	Reason string
}

func (p Problem) String() string { return p.Link.String() + ": " + p.Reason }

// Slug is the anchor GitHub gives a heading whose text (Markdown source,
// without the leading #s) is heading, before any -1, -2 suffix of a
// repeated heading: the rendered text lowercased, every character but
// letters, marks, digits, '_', '-' and spaces dropped, each space made a
// '-'. Code spans keep their text; links keep their text.
func Slug(heading string) string {
	text := linkRE.ReplaceAllString(heading, "$1")
	text = strings.ReplaceAll(text, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	// An inline link or image: [text](target) or [text](target "title").
	linkRE = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// A reference definition: [label]: target.
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// An explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	codeSpanRE   = regexp.MustCompile("`+[^`]*`+")
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	lineAnchorRE = regexp.MustCompile(`^L(\d+)(?:-L(\d+))?$`)
)

// lines calls f with each line of markdown outside fenced code blocks,
// and its 1-based number.
func lines(markdown string, f func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(markdown, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			// A closing fence: at least as many of the same character, and
			// nothing after them.
			rest := strings.TrimLeft(trimmed, fence[:1])
			if len(trimmed)-len(rest) >= len(fence) && strings.TrimSpace(rest) == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			c := trimmed[:1]
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, c))]
			continue
		}
		f(i+1, line)
	}
}

// Anchors returns the anchors of a page: its headings' slugs, a repeated
// slug suffixed -1, -2, ... as GitHub does, and its explicit <a id> and
// <a name> anchors.
func Anchors(markdown string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	lines(markdown, func(_ int, line string) {
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := Slug(m[2])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	})
	return anchors
}

// Links returns the relative links of a page (named file in the Links),
// outside code blocks and code spans: absolute URLs (with a scheme, or
// starting with //) are left out.
func Links(file, markdown string) []Link {
	var links []Link
	lines(markdown, func(n int, line string) {
		line = codeSpanRE.ReplaceAllString(line, "")
		var targets []string
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[2])
		}
		if m := refDefRE.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if t == "" || schemeRE.MatchString(t) || strings.HasPrefix(t, "//") {
				continue
			}
			links = append(links, Link{File: file, Line: n, Target: t})
		}
	})
	return links
}

// Check checks every relative link of the pages files (paths relative to
// root, slash-separated) and returns the ones that do not resolve. A link
// must stay inside root, its target must exist, and its anchor must be a
// heading's (or explicit) anchor of a Markdown target, or a line of any
// other file.
func Check(root string, files []string) ([]Problem, error) {
	var problems []Problem
	pages := map[string]map[string]bool{} // anchors by page, read once
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := pages[rel]; ok {
			return a, nil
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		pages[rel] = Anchors(string(data))
		return pages[rel], nil
	}
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		for _, l := range Links(file, string(data)) {
			if reason := check(root, l, anchorsOf); reason != "" {
				problems = append(problems, Problem{Link: l, Reason: reason})
			}
		}
	}
	return problems, nil
}

// check returns why l does not resolve, or "".
func check(root string, l Link, anchorsOf func(string) (map[string]bool, error)) string {
	target, anchor, _ := strings.Cut(l.Target, "#")
	target, _, _ = strings.Cut(target, "?")
	target, err := url.PathUnescape(target)
	if err != nil {
		return fmt.Sprintf("the path is not a valid URL path: %v", err)
	}
	rel := l.File
	if target != "" {
		rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(filepath.FromSlash(l.File)), filepath.FromSlash(target))))
		if rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(target) {
			return "the link leaves the repository"
		}
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Sprintf("%s does not exist", rel)
	}
	if anchor == "" {
		return ""
	}
	switch {
	case info.IsDir():
		return fmt.Sprintf("%s is a directory, which has no anchor #%s", rel, anchor)
	case strings.HasSuffix(rel, ".md"):
		anchors, err := anchorsOf(rel)
		if err != nil {
			return err.Error()
		}
		if anchors[anchor] {
			return ""
		}
		return fmt.Sprintf("no heading of %s has the anchor #%s%s", rel, anchor, nearest(anchors, anchor))
	}
	m := lineAnchorRE.FindStringSubmatch(anchor)
	if m == nil {
		return fmt.Sprintf("#%s is not a line anchor (#L12 or #L12-L20), the only anchors of %s", anchor, rel)
	}
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return err.Error()
	}
	n := strings.Count(string(data), "\n")
	if !strings.HasSuffix(string(data), "\n") {
		n++
	}
	for _, s := range m[1:] {
		if s == "" {
			continue
		}
		if line, _ := strconv.Atoi(s); line < 1 || line > n {
			return fmt.Sprintf("%s has %d lines, not line %d", rel, n, line)
		}
	}
	return ""
}

// nearest suggests the anchors that contain the missing one, or that it
// contains.
func nearest(anchors map[string]bool, missing string) string {
	var near []string
	for a := range anchors {
		if strings.Contains(a, missing) || strings.Contains(missing, a) && len(a) > 3 {
			near = append(near, "#"+a)
		}
	}
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	if len(near) > 5 {
		near = near[:5]
	}
	return " (did you mean " + strings.Join(near, ", ") + "?)"
}

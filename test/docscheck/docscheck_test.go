package docscheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/oomguard/oomguard/imagepatch/admission"
	"github.com/oomguard/oomguard/test/testbin"
)

// programs are oomguard's programs whose flags the docs may name.
var programs = []string{"oomguard-hook", "oomguard-nri", "oomguard-doctor", "imagepatch", "oomguard-init"}

// skipped are trees whose Markdown is not oomguard's own (third-party
// sources, build outputs).
var skipped = []string{"test/crio/", "vendor/", "third_party/", "build/", "bin/", "node_modules/"}

// repoURL is the repository on GitHub: links to its files there (the chart's
// README, which helm and Artifact Hub show away from the repository, uses
// them) are checked as relative ones.
var repoURL = regexp.MustCompile(`^https://github\.com/oomguard/oomguard/(?:blob|tree)/main/(.*)$`)

// doc is one Markdown file.
type doc struct {
	path   string // relative to the repository, with slashes
	text   string // as written
	prose  string // fenced code blocks blanked, newlines kept
	plain  string // prose with inline code blanked too
	fences []fence
	spans  []span
}

// fence is a fenced code block.
type fence struct {
	lang  string
	line  int // of its first line of content
	lines []string
}

// span is an inline code span.
type span struct {
	line int
	code string // its content, newlines as spaces
}

// line is the 1-based line of byte offset i of s: d's text, or its prose
// or plain text, which keep its lines (not their lengths).
func line(s string, i int) int { return strings.Count(s[:i], "\n") + 1 }

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
	docsOnce sync.Once
	docs     []*doc
	docsErr  error
)

func repoRoot(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() { rootDir, rootErr = testbin.RepoRoot() })
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

// markdown is every Markdown file of the repository but the skipped trees:
// what git tracks or would track (new files included), else a walk.
func markdown(t *testing.T) []*doc {
	t.Helper()
	root := repoRoot(t)
	docsOnce.Do(func() {
		var paths []string
		out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md").Output()
		if err == nil {
			for _, p := range strings.Split(string(out), "\x00") {
				if p != "" {
					paths = append(paths, p)
				}
			}
		} else {
			err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(root, p)
				rel = filepath.ToSlash(rel)
				if e.IsDir() && (e.Name() == ".git" || slices.Contains(skipped, rel+"/")) {
					return filepath.SkipDir
				}
				if !e.IsDir() && strings.HasSuffix(p, ".md") {
					paths = append(paths, rel)
				}
				return nil
			})
			if err != nil {
				docsErr = err
				return
			}
		}
		slices.Sort(paths)
		for _, p := range slices.Compact(paths) {
			if slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(p, s) }) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
			if errors.Is(err, fs.ErrNotExist) { // tracked, deleted in the work tree
				continue
			}
			if err != nil {
				docsErr = err
				return
			}
			docs = append(docs, parse(p, string(b)))
		}
	})
	if docsErr != nil {
		t.Fatal(docsErr)
	}
	if len(docs) < 3 {
		t.Fatalf("only %d Markdown files found", len(docs))
	}
	return docs
}

var fenceLine = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([^`\\s]*)")

// parse splits a Markdown file into its fenced code blocks, its inline
// code spans and the rest.
func parse(p, text string) *doc {
	d := &doc{path: p, text: text}
	lines := strings.Split(text, "\n")
	prose := make([]string, len(lines))
	var open *fence
	var marker string
	for i, l := range lines {
		m := fenceLine.FindStringSubmatch(l)
		switch {
		case open == nil && m != nil:
			open, marker = &fence{lang: strings.ToLower(m[2]), line: i + 2}, m[1]
		case open != nil && m != nil && m[2] == "" && m[1][0] == marker[0] && len(m[1]) >= len(marker):
			d.fences = append(d.fences, *open)
			open = nil
		case open != nil:
			open.lines = append(open.lines, l)
		default:
			prose[i] = l
		}
	}
	if open != nil {
		d.fences = append(d.fences, *open)
	}
	d.prose = strings.Join(prose, "\n")
	// Inline code: a run of backticks closed by a run of the same length
	// within the paragraph.
	plain := []byte(d.prose)
	for i := 0; i < len(d.prose); {
		if d.prose[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(d.prose) && d.prose[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(d.prose); {
			if strings.HasPrefix(d.prose[j:], "\n\n") {
				break
			}
			if d.prose[j] != '`' {
				j++
				continue
			}
			k := 0
			for j+k < len(d.prose) && d.prose[j+k] == '`' {
				k++
			}
			if k == n {
				end = j
				break
			}
			j += k
		}
		if end < 0 {
			i += n
			continue
		}
		code := strings.TrimSpace(strings.ReplaceAll(d.prose[i+n:end], "\n", " "))
		d.spans = append(d.spans, span{line: line(d.prose, i), code: code})
		for k := i; k < end+n; k++ {
			if plain[k] != '\n' {
				plain[k] = ' '
			}
		}
		i = end + n
	}
	d.plain = string(plain)
	return d
}

var (
	heading    = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	inlineLink = regexp.MustCompile(`\[([^\]]+)\]\(`)
)

// anchors are the #fragments a file's headings get on GitHub: the text
// lowercased, spaces to '-', punctuation but '-' and '_' dropped, a repeat
// numbered -1, -2, …
func (d *doc) anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(d.prose, -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(d.prose, -1) {
		out[m[1]] = true
	}
	return out
}

var linkInHeading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func slug(h string) string {
	h = linkInHeading.ReplaceAllString(h, "$1")
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// link is a link's target and where it is written.
type link struct {
	line   int
	target string
}

var refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)`)

// links are the targets of d's inline links and images, and of its
// reference definitions, outside code.
func (d *doc) links() []link {
	var out []link
	for _, m := range inlineLink.FindAllStringSubmatchIndex(d.plain, -1) {
		rest := d.plain[m[1]:]
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			continue
		}
		target := strings.TrimSpace(rest[:end])
		if i := strings.IndexAny(target, " \t\n"); i >= 0 { // a title
			target = target[:i]
		}
		target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
		out = append(out, link{line: line(d.plain, m[1]), target: target})
	}
	for _, m := range refDef.FindAllStringSubmatchIndex(d.plain, -1) {
		out = append(out, link{line: line(d.plain, m[2]), target: d.plain[m[2]:m[3]]})
	}
	return out
}

var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// Every relative link of every Markdown file reaches a file of the
// repository, and every #anchor a heading of the file it names.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	all := markdown(t)
	byPath := map[string]*doc{}
	for _, d := range all {
		byPath[d.path] = d
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchors[p]; ok {
			return a, nil
		}
		d := byPath[p]
		if d == nil {
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
			if err != nil {
				return nil, err
			}
			d = parse(p, string(b))
		}
		anchors[p] = d.anchors()
		return anchors[p], nil
	}
	checked := 0
	for _, d := range all {
		for _, l := range d.links() {
			where := fmt.Sprintf("%s:%d: link %q", d.path, l.line, l.target)
			target := l.target
			fromRoot := false
			if m := repoURL.FindStringSubmatch(target); m != nil {
				target, fromRoot = m[1], true
			} else if scheme.MatchString(target) {
				continue // another site: not this test's business
			}
			if target == "" {
				t.Errorf("%s: empty target", where)
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			file, err := url.PathUnescape(file)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			p := d.path
			if file != "" {
				if fromRoot || strings.HasPrefix(file, "/") {
					p = path.Clean(strings.TrimPrefix(file, "/"))
				} else {
					p = path.Join(path.Dir(d.path), file)
				}
				if p == ".." || strings.HasPrefix(p, "../") {
					t.Errorf("%s: leaves the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
					t.Errorf("%s: %s does not exist", where, p)
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(p, ".md") {
				continue // a source file's #L10 is GitHub's, not a heading
			}
			a, err := anchorsOf(p)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s: %s has no heading whose anchor is #%s", where, p, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links checked: the parser is broken", checked)
	}
	t.Logf("%d relative links in %d Markdown files", checked, len(all))
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// built builds oomguard's programs as make build does, once for the tests.
func built(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "oomguard-docscheck")
		if binErr != nil {
			return
		}
		var wg sync.WaitGroup
		errs := make([]error, len(programs))
		for i, p := range programs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = testbin.Program(binDir, p)
			}()
		}
		wg.Wait()
		binErr = errors.Join(errs...)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// run runs a program and returns its stdout and stderr together.
func run(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

var (
	flagsOf     = regexp.MustCompile(`^Flags of (\S+)(?: (\S+))?:$`)
	flagLine    = regexp.MustCompile(`^  (--?[A-Za-z][\w-]*)`)
	anyFlag     = regexp.MustCompile(`(?:^|[\s\[|(,])(--?[A-Za-z][\w-]*)`)
	subcommand  = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	globalFlags = []string{"help", "h", "version"}
)

// helpFlags reads prog's --help and each subcommand's: subcommand ("" for
// the program itself) → its flags, without their dashes.
func helpFlags(t *testing.T, bin, prog string) map[string]map[string]bool {
	t.Helper()
	out, err := run(bin, "--help")
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", prog, err, out)
	}
	flags := map[string]map[string]bool{"": {}}
	add := func(sub, f string) {
		if flags[sub] == nil {
			flags[sub] = map[string]bool{}
		}
		flags[sub][strings.TrimLeft(f, "-")] = true
	}
	read := func(text, sub string) {
		section := "\x00"
		sections := false
		for _, l := range strings.Split(text, "\n") {
			if m := flagsOf.FindStringSubmatch(l); m != nil && m[1] == prog {
				section, sections = m[2], true
				continue
			}
			if l == "" || !strings.HasPrefix(l, " ") {
				section = "\x00"
			}
			if f := flagLine.FindStringSubmatch(l); f != nil && section != "\x00" {
				add(section, f[1])
			}
			// Usage lines: PROG SUBCOMMAND …
			if f := strings.Fields(l); sub == "" && len(f) >= 2 && f[0] == prog && subcommand.MatchString(f[1]) {
				if flags[f[1]] == nil {
					flags[f[1]] = map[string]bool{}
				}
			}
		}
		if !sections { // oomguard-init: one usage line
			for _, m := range anyFlag.FindAllStringSubmatch(text, -1) {
				add(sub, m[1])
			}
		}
	}
	read(out, "")
	for sub := range flags {
		if sub == "" {
			continue
		}
		out, err := run(bin, sub, "--help")
		if err != nil {
			t.Fatalf("%s %s --help: %v\n%s", prog, sub, err, out)
		}
		read(out, sub)
	}
	for _, s := range flags {
		for _, g := range globalFlags {
			s[g] = true
		}
	}
	return flags
}

// command is one of oomguard's programs as a doc runs it.
type command struct {
	where string
	words []string // the program first
}

// shellLangs are the code blocks that hold command lines.
var shellLangs = []string{"", "sh", "bash", "shell", "console", "text"}

// commands are the command lines in d that start with one of oomguard's
// programs: in shell code blocks (each simple command of a line) and in
// inline code.
func (d *doc) commands() []command {
	var out []command
	take := func(where, text string) {
		words := strings.Fields(text)
		for len(words) > 0 {
			// The next simple command: up to a standalone separator.
			end := slices.IndexFunc(words, func(w string) bool {
				return w == "|" || w == "||" || w == "&&" || w == ";" || strings.HasPrefix(w, "#")
			})
			seg := words
			if end >= 0 {
				seg = words[:end]
			}
			for len(seg) > 0 && (seg[0] == "$" || seg[0] == "sudo" || strings.Contains(seg[0], "=") && !strings.HasPrefix(seg[0], "-")) {
				seg = seg[1:]
			}
			if len(seg) > 0 && slices.Contains(programs, path.Base(strings.Trim(seg[0], "`'\"[]("))) {
				out = append(out, command{where: where, words: seg})
			}
			if end < 0 || strings.HasPrefix(words[end], "#") {
				break
			}
			words = words[end+1:]
		}
	}
	for _, f := range d.fences {
		if !slices.Contains(shellLangs, f.lang) {
			continue
		}
		joined := ""
		start := f.line
		for i, l := range f.lines {
			if joined == "" {
				start = f.line + i
			}
			if strings.HasSuffix(l, "\\") {
				joined += strings.TrimSuffix(l, "\\") + " "
				continue
			}
			joined += l
			if text := strings.TrimSpace(joined); !strings.HasPrefix(text, "#") {
				take(fmt.Sprintf("%s:%d", d.path, start), text)
			}
			joined = ""
		}
	}
	for _, s := range d.spans {
		take(fmt.Sprintf("%s:%d", d.path, s.line), s.code)
	}
	return out
}

// Every flag the docs give one of oomguard's programs is one its --help
// lists, for the subcommand the command line runs.
func TestFlags(t *testing.T) {
	bin := built(t)
	flags := map[string]map[string]map[string]bool{}
	for _, p := range programs {
		flags[p] = helpFlags(t, filepath.Join(bin, p), p)
		if len(flags[p][""]) <= len(globalFlags) && len(flags[p]) == 1 {
			t.Fatalf("%s --help lists no flag: the parser is broken", p)
		}
	}
	checked := 0
	for _, d := range markdown(t) {
		for _, c := range d.commands() {
			prog := path.Base(strings.Trim(c.words[0], "`'\"[]("))
			args := c.words[1:]
			sub := ""
			if len(args) > 0 && flags[prog][strings.Trim(args[0], "`'\"")] != nil {
				sub = strings.Trim(args[0], "`'\"")
			}
			for _, a := range args {
				a = strings.Trim(a, "`'\"[](),;")
				if a == "--" { // the rest is the target's (oomguard-init -- CMD)
					break
				}
				if !strings.HasPrefix(a, "-") || a == "-" || len(strings.TrimLeft(a, "-")) == 0 {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if name == "" || !unicode.IsLetter(rune(name[0])) {
					continue // -997, a negative number
				}
				checked++
				if !flags[prog][sub][name] {
					cmd := strings.TrimSpace(prog + " " + sub)
					t.Errorf("%s: %q: %s has no flag --%s (see %s --help)", c.where, strings.Join(c.words, " "), cmd, name, cmd)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d flags checked: the parser is broken", checked)
	}
	t.Logf("%d flags of oomguard's programs", checked)
}

var (
	metricName = regexp.MustCompile(`oomguard_[a-z0-9_]+`)
	registered = regexp.MustCompile(`Name:\s*"(oomguard_[a-z0-9_]+)"`)
)

// Every oomguard_* metric the docs name is one the programs export: the
// plugin's /metrics, the doctor's textfile, the webhook's registry.
func TestMetrics(t *testing.T) {
	root := repoRoot(t)
	bin := built(t)
	exported := map[string]string{} // name → who exports it
	addText := func(who, text string) {
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if rest, ok := strings.CutPrefix(l, "# HELP "); ok {
				exported[strings.Fields(rest)[0]] = who
				continue
			}
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			exported[strings.FieldsFunc(l, func(r rune) bool { return r == '{' || r == ' ' })[0]] = who
		}
	}
	config := filepath.Join(root, "deploy", "config.toml")

	// The plugin, connected to no runtime: its series exist from the start.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	plugin := exec.Command(filepath.Join(bin, "oomguard-nri"), "--socket", filepath.Join(t.TempDir(), "nri.sock"),
		"--metrics-address", addr, "--config", config)
	var log strings.Builder
	plugin.Stdout, plugin.Stderr = &log, &log
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		plugin.Process.Kill()
		plugin.Wait()
	}()
	var scraped string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && strings.Contains(string(b), "oomguard_nri_connected") {
				scraped = string(b)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's /metrics at %s: %v\n%s", addr, err, log.String())
		}
	}
	addText("oomguard-nri", scraped)

	// The doctor's textfile.
	out, err := run(filepath.Join(bin, "oomguard-doctor"), "--prometheus", "--config", config, "--sample", "0", "--runtime-endpoint", "none")
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) || !strings.Contains(out, "oomguard_doctor_severity") {
		t.Fatalf("oomguard-doctor --prometheus: %v\n%s", err, out)
	}
	addText("oomguard-doctor", out)

	// The webhook's registry, as `imagepatch webhook` serves it (it needs a
	// certificate and a registry to run; its metrics are made here alike).
	wm := admission.NewMetrics()
	wm.WatchCaches(func() map[string]int { return map[string]int{"tags": 0} })
	families, err := wm.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		exported[f.GetName()] = "imagepatch webhook"
	}

	// Families labelled by what happened (the rule, the killed pod) have no
	// series, and so no # HELP, until it happens: the plugin registers them;
	// the Event recorder's with --events alone (it needs an API server).
	noSeries := map[string]bool{}
	src, _ := filepath.Glob(filepath.Join(root, "nri-plugin", "*.go"))
	for _, pkg := range []string{"oomkills", "podevents"} {
		more, _ := filepath.Glob(filepath.Join(root, "internal", pkg, "*.go"))
		src = append(src, more...)
	}
	for _, f := range src {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range registered.FindAllStringSubmatch(string(b), -1) {
			if _, ok := exported[m[1]]; !ok {
				exported[m[1]], noSeries[m[1]] = "oomguard-nri (no series before its first event)", true
			}
		}
	}
	for _, must := range []string{"oomguard_nri_connected", "oomguard_doctor_severity", "oomguard_webhook_reviews_total", "oomguard_oom_kills_total"} {
		if exported[must] == "" {
			t.Fatalf("%s is not among the exported metrics: the collection is broken", must)
		}
	}
	if len(noSeries) > 0 {
		t.Logf("registered without a series until an event: %v", slices.Sorted(maps.Keys(noSeries)))
	}

	checked := 0
	documented := map[string]bool{}
	for _, d := range markdown(t) {
		for _, m := range metricName.FindAllStringIndex(d.text, -1) {
			name := d.text[m[0]:m[1]]
			documented[name] = true
			before, after := "", d.text[m[1]:]
			if m[0] > 0 {
				before = d.text[m[0]-1 : m[0]]
			}
			switch {
			case before != "" && (isWord(rune(before[0]))):
				continue // part of a longer word (kube-system_oomguard-nri-…)
			case strings.HasSuffix(name, "_"):
				continue // a prefix: oomguard_doctor_…, oomguard_webhook_*
			case strings.HasPrefix(after, "-") || len(after) > 1 && after[0] == '.' && isWord(rune(after[1])):
				continue // a file name (oomguard_doctor.prom) or another word
			}
			checked++
			if exported[name] != "" {
				continue
			}
			base := name
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, s)
			}
			if exported[base] == "" {
				t.Errorf("%s:%d: %s is not exported by oomguard-nri, oomguard-doctor nor imagepatch webhook", d.path, line(d.text, m[0]), name)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric names checked: the parser is broken", checked)
	}
	// And the other way: every metric a program exports is in the docs.
	for name, who := range exported {
		base := name
		for _, s := range []string{"_bucket", "_sum", "_count"} { // a histogram's series
			base = strings.TrimSuffix(base, s)
		}
		if strings.HasPrefix(name, "oomguard_") && !documented[name] && !documented[base] {
			t.Errorf("%s (%s) is documented nowhere: add it to docs/operating.md's table, doctor.md's or imagepatch.md's", name, who)
		}
	}
	t.Logf("%d metric names, against %d exported", checked, len(exported))
}

func isWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

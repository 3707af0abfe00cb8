// Command report turns the outputs of the reliability suite into one table
// and writes docs/RELIABILITY.md:
//
//   - attacks tried / contained: `go test -json` subtests named attack/* and
//     abuse/* (test/gohttp, and the TestReview* root tests of internal
//     packages), plus the E2B SDK security tests (node spec output) and the
//     tests of other node suites (cluster, microVM) whose titles start with a
//     security-review finding id;
//   - per security-review finding (H1, M4, L6, R2-3 …): how many attacks
//     tried it and held, from the id in the subtest name
//     (attack/<id>-<what>) or the start of a node test title;
//   - faults injected / survived: subtests named fault/*;
//   - load held: the JSON summary of bench/soak;
//   - fuzz executions: the log of scripts/fuzz.sh.
//
// bench/report/run.sh produces all inputs against a running daemon and calls
// this program. Known findings (bench/report/findings.md) are appended as is.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type outcome struct {
	name   string
	passed bool
}

func main() {
	var goJSON, nodeOut, nodeReview listFlag
	flag.Var(&goJSON, "go-json", "`go test -json` output of test/gohttp or of TestReview* root tests (attack/, abuse/, fault/ subtests; repeatable)")
	flag.Var(&nodeOut, "node", "node --test spec output of test/e2e/security.test.mjs: every test is an attack (repeatable)")
	flag.Var(&nodeReview, "node-review", "node --test spec output of another suite (cluster, microVM): only tests whose title starts with a finding id (H1, M6 …) count (repeatable)")
	fuzzLog := flag.String("fuzz", "", "log of scripts/fuzz.sh")
	soakJSON := flag.String("soak", "", "JSON summary of bench/soak")
	findings := flag.String("findings", "bench/report/findings.md", "markdown appended as the findings section")
	out := flag.String("out", "docs/RELIABILITY.md", "markdown file to write (\"\" = stdout only)")
	flag.Parse()

	var r report
	for _, p := range goJSON {
		if err := r.readGoJSON(p); err != nil {
			fail(err)
		}
	}
	for _, p := range nodeOut {
		if err := r.readNode(p, false); err != nil {
			fail(err)
		}
	}
	for _, p := range nodeReview {
		if err := r.readNode(p, true); err != nil {
			fail(err)
		}
	}
	if *fuzzLog != "" {
		if err := r.readFuzz(*fuzzLog); err != nil {
			fail(err)
		}
	}
	if *soakJSON != "" {
		b, err := os.ReadFile(*soakJSON)
		if err != nil {
			fail(err)
		}
		r.soak = &soakSummary{}
		if err := json.Unmarshal(b, r.soak); err != nil {
			fail(fmt.Errorf("%s: %w", *soakJSON, err))
		}
	}
	var extra []byte
	if *findings != "" {
		extra, _ = os.ReadFile(*findings)
	}
	table := r.table()
	fmt.Print(table)
	if *out != "" {
		doc := r.markdown(table, string(extra))
		if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
			fail(err)
		}
		fmt.Fprintln(os.Stderr, "wrote", *out)
	}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// findingID matches a security-review finding id at the start of a name:
// H1, M4, L6 (the first review) or R2-3 (the second pass), followed by a
// separator.
var findingID = regexp.MustCompile(`^((?:[HML]\d+)|(?:R\d+-\d+))(?:[-:. ]|$)`)

// finding returns the review finding an attack's name starts with ("" if
// none): the part after attack/ for a Go subtest, after "sdk: " for a node
// test.
func finding(name string) string {
	if i := strings.LastIndex(name, "/attack/"); i >= 0 {
		name = name[i+len("/attack/"):]
	}
	name = strings.TrimPrefix(name, "sdk: ")
	if m := findingID.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return ""
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

type fuzzResult struct {
	target, pkg string
	execs       int64
	ok          bool
}

type soakSummary struct {
	Profile      string   `json:"profile"`
	Clients      int      `json:"clients"`
	Rounds       int      `json:"rounds"`
	Elapsed      float64  `json:"elapsed_s"`
	Requests     int      `json:"requests"`
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples"`
	Ops          map[string]struct {
		Count  int     `json:"count"`
		Errors int     `json:"errors"`
		P50ms  float64 `json:"p50_ms"`
		P99ms  float64 `json:"p99_ms"`
	} `json:"ops"`
	RSSBeforeKiB int64 `json:"daemon_rss_before_kib"`
	RSSAfterKiB  int64 `json:"daemon_rss_after_kib"`
}

type report struct {
	attacks, faults []outcome
	fuzz            []fuzzResult
	soak            *soakSummary
}

// readGoJSON collects the final pass/fail of every attack/abuse/fault subtest.
func (r *report) readGoJSON(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	final := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev struct {
			Action string
			Test   string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		if ev.Action == "pass" || ev.Action == "fail" {
			final[ev.Test] = ev.Action == "pass"
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	names := make([]string, 0, len(final))
	for n := range final {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch {
		case strings.Contains(n, "/attack/") || strings.Contains(n, "/abuse/"):
			r.attacks = append(r.attacks, outcome{n, final[n]})
		case strings.Contains(n, "/fault/"):
			r.faults = append(r.faults, outcome{n, final[n]})
		}
	}
	return nil
}

// readNode reads node's spec reporter: "✔ name (12ms)" / "✖ name (..)".
// With reviewOnly only tests whose title starts with a finding id count.
func (r *report) readNode(path string, reviewOnly bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	nested := false // the last result was indented: an unindented one next closes its suite
	for _, line := range strings.Split(string(b), "\n") {
		l := strings.TrimSpace(line)
		if l == "✖ failing tests:" { // the summary repeats the failures
			break
		}
		var passed bool
		switch {
		case strings.HasPrefix(l, "✔ "):
			passed = true
		case strings.HasPrefix(l, "✖ "):
		default:
			continue
		}
		indented := strings.HasPrefix(line, "  ")
		suite := !indented && nested
		nested = indented
		name := strings.TrimSpace(l[len("✔ "):])
		if i := strings.LastIndex(name, " ("); i > 0 {
			name = name[:i]
		}
		if reviewOnly {
			if suite || finding(name) == "" {
				continue
			}
		} else if name == "security" || !indented { // the describe block itself
			continue
		}
		r.attacks = append(r.attacks, outcome{"sdk: " + name, passed})
	}
	return nil
}

// readFuzz reads "fuzz-result <target> <pkg> <execs> <ok|FAIL>" lines.
func (r *report) readFuzz(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "fuzz-result" {
			continue
		}
		n, _ := strconv.ParseInt(f[3], 10, 64)
		r.fuzz = append(r.fuzz, fuzzResult{target: f[1], pkg: f[2], execs: n, ok: f[4] == "ok"})
	}
	return nil
}

// byFinding groups the attacks named after a review finding by its id.
func (r *report) byFinding() map[string][]outcome {
	m := map[string][]outcome{}
	for _, o := range r.attacks {
		if id := finding(o.name); id != "" {
			m[id] = append(m[id], o)
		}
	}
	return m
}

// findingLess orders ids H before M before L before R…, then by number.
func findingLess(a, b string) bool {
	rank := func(id string) (int, int, int) {
		k := strings.IndexByte("HMLR", id[0])
		if id[0] == 'R' {
			var pass, n int
			fmt.Sscanf(id, "R%d-%d", &pass, &n)
			return k, pass, n
		}
		n, _ := strconv.Atoi(id[1:])
		return k, 0, n
	}
	ak, ap, an := rank(a)
	bk, bp, bn := rank(b)
	if ak != bk {
		return ak < bk
	}
	if ap != bp {
		return ap < bp
	}
	return an < bn
}

func count(list []outcome) (passed int) {
	for _, o := range list {
		if o.passed {
			passed++
		}
	}
	return passed
}

func (r *report) table() string {
	var b strings.Builder
	fmt.Fprintln(&b, "| area | tried | held | detail |")
	fmt.Fprintln(&b, "|---|---:|---:|---|")
	fmt.Fprintf(&b, "| attacks and API abuse | %d | %d | escape, resource and API-abuse attempts contained; daemon and a witness sandbox unharmed |\n",
		len(r.attacks), count(r.attacks))
	fmt.Fprintf(&b, "| faults injected | %d | %d | daemon SIGKILLed mid-create/upload/pause/fork/template build, data-dir disk full, OOM-stopped stream: no leaks, nothing half-created, sandboxes running+reachable or gone |\n",
		len(r.faults), count(r.faults))
	if s := r.soak; s != nil {
		var p50, p99 []string
		ops := make([]string, 0, len(s.Ops))
		for op := range s.Ops {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			p50 = append(p50, fmt.Sprintf("%s %.0f", op, s.Ops[op].P50ms))
			p99 = append(p99, fmt.Sprintf("%s %.0f", op, s.Ops[op].P99ms))
		}
		fmt.Fprintf(&b, "| load (%s: %d clients, %d sandboxes, %.0f s) | %d requests | %d ok | p50 ms: %s; p99 ms: %s; daemon RSS %d → %d KiB |\n",
			s.Profile, s.Clients, s.Rounds, s.Elapsed, s.Requests, s.Requests-s.Errors,
			strings.Join(p50, ", "), strings.Join(p99, ", "), s.RSSBeforeKiB, s.RSSAfterKiB)
	}
	var execs int64
	okTargets := 0
	for _, f := range r.fuzz {
		execs += f.execs
		if f.ok {
			okTargets++
		}
	}
	fmt.Fprintf(&b, "| fuzz targets | %d | %d | %d executions in total, no crash |\n", len(r.fuzz), okTargets, execs)
	return b.String()
}

func (r *report) markdown(table, findings string) string {
	var b strings.Builder
	fmt.Fprintln(&b, "# Reliability and security report")
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "Generated by `bench/report` (`bash bench/report/run.sh`) on %s. Inputs: the raw-HTTP suite\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintln(&b, "`test/gohttp` (security_test.go, abuse_test.go, apiabuse_test.go, review_*_test.go, faults*_test.go, diskfull_test.go),")
	fmt.Fprintln(&b, "the `TestReview*` root tests of `internal/…`, the E2B SDK suite `test/e2e/security.test.mjs`, the security-review tests")
	fmt.Fprintln(&b, "of the cluster and microVM suites (titles that start with a finding id), `bench/soak` and `scripts/fuzz.sh`. A \"held\"")
	fmt.Fprintln(&b, "attack failed *and* the daemon and a witness sandbox were unharmed afterwards.")
	fmt.Fprintln(&b)
	fmt.Fprint(&b, table)
	section := func(title string, list []outcome) {
		if len(list) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		for _, o := range list {
			mark := "held"
			if !o.passed {
				mark = "**FAILED**"
			}
			fmt.Fprintf(&b, "- %s — %s\n", o.name, mark)
		}
	}
	if byID := r.byFinding(); len(byID) > 0 {
		fmt.Fprintln(&b, "\n## Security review findings\n\nAttacks named after a finding of a security review (`docs/security/`, issue 23): how many tried it, how many held.\n\n| finding | tried | held |\n|---|---:|---:|")
		ids := make([]string, 0, len(byID))
		for id := range byID {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return findingLess(ids[i], ids[j]) })
		for _, id := range ids {
			fmt.Fprintf(&b, "| %s | %d | %d |\n", id, len(byID[id]), count(byID[id]))
		}
	}
	section("Attacks and abuse", r.attacks)
	section("Faults", r.faults)
	if len(r.fuzz) > 0 {
		fmt.Fprintf(&b, "\n## Fuzz targets\n\n| target | package | executions | result |\n|---|---|---:|---|\n")
		for _, f := range r.fuzz {
			res := "ok"
			if !f.ok {
				res = "**FAIL**"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", f.target, f.pkg, f.execs, res)
		}
	}
	if s := r.soak; s != nil {
		fmt.Fprintf(&b, "\n## Load (bench/soak, profile %s)\n\n| op | count | errors | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n", s.Profile)
		ops := make([]string, 0, len(s.Ops))
		for op := range s.Ops {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			o := s.Ops[op]
			fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.1f |\n", op, o.Count, o.Errors, o.P50ms, o.P99ms)
		}
		for _, e := range s.ErrorSamples {
			fmt.Fprintf(&b, "\nerror sample: `%s`\n", e)
		}
	}
	if strings.TrimSpace(findings) != "" {
		fmt.Fprintln(&b)
		fmt.Fprint(&b, findings)
	}
	return b.String()
}

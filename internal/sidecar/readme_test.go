// The fuzz runs of hack/test.sh build with -tags elector_fuzz and leave this
// file out: its typed clientset (client-go's kubernetes package, every API
// group) would more than double the fuzzing build, which instruments every
// package the test binary links.

//go:build !elector_fuzz

package sidecar

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
	"github.com/elector-sidecar/elector-sidecar/pkg/apphealth"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
)

// readmeSection returns the README's "## title" section (up to the next
// "## " heading).
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	head := "\n## " + title + "\n"
	i := strings.Index(s, head)
	if i < 0 {
		t.Fatalf("README has no %q section", strings.TrimSpace(head))
	}
	s = s[i+len(head):]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

type readmeFlag struct{ env, def string }

// readmeFlags parses the "Flags" table: | `--name` | `ENV` | default | meaning |.
func readmeFlags(t *testing.T) map[string]readmeFlag {
	t.Helper()
	section := readmeSection(t, "Flags")
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| (`[A-Z0-9_]+`)? *\\| ([^|]*?) *\\| [^|]*\\|$")
	rows := map[string]readmeFlag{}
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		// Every row of the "| flag |" table but its separator is a flag
		// (the aliases have a table of their own).
		if strings.HasPrefix(line, "| flag |") {
			inTable = true
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inTable = false
		}
		if !inTable || strings.HasPrefix(line, "| ---") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("README Flags row does not parse as | `--flag` | `ENV` or empty | default | meaning |:\n%s", line)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("README lists --%s twice", m[1])
		}
		rows[m[1]] = readmeFlag{env: strings.Trim(m[2], "`"), def: m[3]}
	}
	return rows
}

// singleLiteral matches a cell that is one code literal and nothing else.
var singleLiteral = regexp.MustCompile("^`[^`]*`$")

// TestReadmeListsEveryFlag: the README's Flags table lists exactly the flags
// Parse registers, each with its env var from Flags and, where the default
// is a literal, that default.
func TestReadmeListsEveryFlag(t *testing.T) {
	rows := readmeFlags(t)
	envs := map[string]string{}
	for _, f := range Flags {
		envs[f.name] = f.env
	}
	fs := newFlagSet(&Config{})
	registered := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return // an alias (TestReadmeListsEveryAlias)
		}
		registered[f.Name] = true
		r, ok := rows[f.Name]
		if !ok {
			t.Errorf("--%s is not in the README's Flags table", f.Name)
			return
		}
		if r.env != envs[f.Name] {
			t.Errorf("README: --%s env %q, want %q", f.Name, r.env, envs[f.Name])
		}
		switch def := f.DefValue; {
		case def != "" && def != "false":
			// A literal default: the README shows exactly it.
			if want := "`" + def + "`"; r.def != want {
				t.Errorf("README: --%s default %s, want %s", f.Name, r.def, want)
			}
		case singleLiteral.MatchString(r.def):
			// No literal default: the README explains the derived one
			// in words and must not claim a literal the flag does not have.
			t.Errorf("README: --%s default %s, but the flag's default is %q", f.Name, r.def, def)
		}
	})
	for name := range rows {
		if !registered[name] {
			t.Errorf("README lists --%s, which Parse does not register", name)
		}
	}
	for _, f := range Flags {
		if !registered[f.name] {
			t.Errorf("Flags lists --%s (%s), which Parse does not register", f.name, f.env)
		}
	}
	if len(rows) < 10 {
		t.Errorf("only %d README rows parsed; the table was not found?", len(rows))
	}
}

// TestReadmeExitCodeExample: the README's example of a bad-flag line is
// exactly what the binary prints (main prefixes "elector-sidecar: ").
func TestReadmeExitCodeExample(t *testing.T) {
	section := readmeSection(t, "Flags")
	m := regexp.MustCompile("`(elector-sidecar: --lease-duration [^`]*)`").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("README's exit codes paragraph has no `elector-sidecar: --lease-duration ...` example")
	}
	_, err := Parse([]string{"--lease-name=l", "--lease-duration=10s"}, testEnv(nil, "", "h"), nil)
	if err == nil {
		t.Fatal("Parse(--lease-duration=10s) succeeded")
	}
	if got := "elector-sidecar: " + err.Error(); got != m[1] {
		t.Errorf("binary prints %q, README says %q", got, m[1])
	}
}

// TestReadmeAppHealthSection: the "App health" section's command line is
// accepted by Parse as written (and sets what it shows), and the section
// names the metrics the prober registers and the reason a sidecar starts with.
func TestReadmeAppHealthSection(t *testing.T) {
	section := readmeSection(t, "App health")
	var cmds []testsupport.ConsoleCommand
	for _, b := range testsupport.MarkdownCodeBlocks(section) {
		if b.Lang == "console" {
			cmds = append(cmds, testsupport.ConsoleCommands(b.Code)...)
		}
	}
	if len(cmds) != 1 {
		t.Fatalf("README App health: want one console command, found %d", len(cmds))
	}
	args := strings.Fields(strings.ReplaceAll(cmds[0].Command, "\\\n", " "))
	if len(args) == 0 || args[0] != "elector-sidecar" {
		t.Fatalf("README App health command %q does not run elector-sidecar", cmds[0].Command)
	}
	c, err := Parse(args[1:], testEnv(nil, "", "h"), nil)
	if err != nil {
		t.Fatalf("README App health command %q: %v", cmds[0].Command, err)
	}
	for _, a := range args[1:] {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		var got string
		switch name {
		case "app-health-url":
			got = c.AppHealthURL
		case "app-health-period":
			got = c.AppHealthPeriod.String()
		case "app-health-timeout":
			got = c.AppHealthTimeout.String()
		case "app-health-failure-threshold":
			got = strconv.Itoa(c.AppHealthFailureThreshold)
		case "app-health-success-threshold":
			got = strconv.Itoa(c.AppHealthSuccessThreshold)
		default:
			continue
		}
		if got != val {
			t.Errorf("README App health: --%s=%s parsed as %s", name, val, got)
		}
	}
	if c.AppHealthURL == "" {
		t.Error("README App health command sets no --app-health-url")
	}

	reg := prometheus.NewRegistry()
	if _, err := apphealth.New(apphealth.Config{URL: "http://127.0.0.1:1/healthz", Period: 2 * time.Second, Timeout: time.Second,
		FailureThreshold: 1, SuccessThreshold: 1, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.Contains(section, "`"+mf.GetName()+"`") {
			t.Errorf("README App health does not name the metric %s", mf.GetName())
		}
	}
	if !strings.Contains(section, `"`+AppNotHealthyYet+`"`) {
		t.Errorf("README App health does not quote the start reason %q", AppNotHealthyYet)
	}
}

// TestReadmeLeaderOnlyRoutingSection: the "Leader-only routing" section's
// command line is accepted by Parse as written, with the label key it shows
// (the chart's default), and the section names the labeler's metric.
func TestReadmeLeaderOnlyRoutingSection(t *testing.T) {
	section := readmeSection(t, "Leader-only routing")
	var cmds []testsupport.ConsoleCommand
	for _, b := range testsupport.MarkdownCodeBlocks(section) {
		if b.Lang == "console" {
			cmds = append(cmds, testsupport.ConsoleCommands(b.Code)...)
		}
	}
	if len(cmds) != 1 {
		t.Fatalf("README Leader-only routing: want one console command, found %d", len(cmds))
	}
	args := strings.Fields(strings.ReplaceAll(cmds[0].Command, "\\\n", " "))
	if len(args) == 0 || args[0] != "elector-sidecar" {
		t.Fatalf("README Leader-only routing command %q does not run elector-sidecar", cmds[0].Command)
	}
	c, err := Parse(args[1:], testEnv(nil, "", "h"), nil)
	if err != nil {
		t.Fatalf("README Leader-only routing command %q: %v", cmds[0].Command, err)
	}
	if c.LeaderLabel != leaderlabel.DefaultKey {
		t.Errorf("README Leader-only routing command sets --leader-label %q, want the chart's key %q", c.LeaderLabel, leaderlabel.DefaultKey)
	}
	if !strings.Contains(section, "`"+leaderlabel.DefaultKey+": \""+leaderlabel.Value+"\"`") {
		t.Errorf("README Leader-only routing does not show the label %s: %q", leaderlabel.DefaultKey, leaderlabel.Value)
	}
	reg := prometheus.NewRegistry()
	if _, err := leaderlabel.New(leaderlabel.Config{Client: clientset.Wrap(fake.NewClientset()), Namespace: "ns", PodName: "p",
		Key: leaderlabel.DefaultKey, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.Contains(section, "`"+mf.GetName()+"{op,result}`") {
			t.Errorf("README Leader-only routing does not name the metric %s{op,result}", mf.GetName())
		}
	}
	if len(mfs) == 0 {
		t.Error("the labeler registered no metrics")
	}
}

// TestReadmeListsEveryAlias: the README's alias table lists exactly
// Aliases, each with its flag.
func TestReadmeListsEveryAlias(t *testing.T) {
	section := readmeSection(t, "Flags")
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| `--([a-z0-9-]+)` \\| ([^|]+?) \\|$")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows[m[1]] = m[2]
		}
	}
	for _, a := range Aliases {
		if of, ok := rows[a.name]; !ok || of != a.of {
			t.Errorf("README alias table: --%s maps to %q, want --%s", a.name, of, a.of)
		}
		delete(rows, a.name)
	}
	for name := range rows {
		t.Errorf("README lists the alias --%s, which Parse does not register", name)
	}
}

// TestReadmeHintAndWarningExamples: the Flags section's example of a hint
// is what the binary prints, and its example warning is what Warnings says.
func TestReadmeHintAndWarningExamples(t *testing.T) {
	section := strings.Join(strings.Fields(readmeSection(t, "Flags")), " ")
	m := regexp.MustCompile("`(elector-sidecar: invalid value [^`]*)`").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("README's Flags section has no `elector-sidecar: invalid value ...` example")
	}
	_, err := Parse([]string{"--lease-name=l", "--lease-duration=15"}, testEnv(nil, "", "h"), nil)
	if got := "elector-sidecar: " + err.Error(); got != m[1] {
		t.Errorf("binary prints %q, README says %q", got, m[1])
	}
	m = regexp.MustCompile("`(ELECTOR_[A-Z_]+)( is set but no flag reads it[^`]*)`").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("README's Flags section has no `ELECTOR_... is set but no flag reads it` example")
	}
	env := testEnv(nil, "", "h")
	env.Environ = func() []string { return []string{m[1] + "=x"} }
	if w := Warnings(nil, env); len(w) != 1 || w[0] != m[1]+m[2] {
		t.Errorf("Warnings for %s = %q, README says %q", m[1], w, m[1]+m[2])
	}
}

// TestReadmeNamesTheLongLeaseFactor: the Safety section's warning about a
// far longer leaseDurationSeconds names the factor the election uses.
func TestReadmeNamesTheLongLeaseFactor(t *testing.T) {
	section := strings.Join(strings.Fields(readmeSection(t, "How the election works")), " ")
	want := fmt.Sprintf("more than %d× a candidate's `--lease-duration`", election.LongLeaseFactor)
	if !strings.Contains(section, want) {
		t.Errorf("README's How the election works does not say %q", want)
	}
}

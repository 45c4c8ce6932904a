package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one line of the table. Ratio is ours/baseline.
type Row struct {
	Metric   string   `json:"metric"`
	Ours     string   `json:"ours"`
	Baseline string   `json:"baseline"`
	Ratio    string   `json:"ratio"`
	Goal     string   `json:"goal,omitempty"`
	Met      string   `json:"met,omitempty"` // "yes", "NO", or "" ("yes; NO" with two goals)
	goals    []judged // the goals Goal and Met come from, in order (goals.go)
}

// Section is one numbered part of the benchmark.
type Section struct {
	Key      string   `json:"key"`
	Title    string   `json:"title"`
	Setup    string   `json:"setup"`
	Baseline string   `json:"baseline"` // what the baseline column is
	Rows     []Row    `json:"rows"`
	Notes    []string `json:"notes,omitempty"`
	Seconds  float64  `json:"seconds"`
	Data     any      `json:"data"`
	Error    string   `json:"error,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores     int     `json:"cores"`
	CPU       string  `json:"cpu"`
	MemoryGiB float64 `json:"memoryGiB"`
	Kernel    string  `json:"kernel"`
	GoVersion string  `json:"goVersion"`
	OS        string  `json:"os"`
	Load      string  `json:"loadAvgAtStart"`
	GitCommit string  `json:"gitCommit"`
	GitDirty  bool    `json:"gitDirty"`
}

// Report is the whole run.
type Report struct {
	Started  time.Time  `json:"started"`
	Seconds  float64    `json:"seconds"`
	Command  string     `json:"command"`
	Machine  Machine    `json:"machine"`
	Sections []*Section `json:"sections"`
}

func machineInfo() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					m.CPU = strings.TrimSpace(v)
					break
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGiB = math.Round(kb/(1<<20)*10) / 10
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.GitCommit = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		m.GitDirty = len(strings.TrimSpace(string(out))) > 0
	}
	return m
}

func (m Machine) String() string {
	dirty := ""
	if m.GitDirty {
		dirty = " (dirty tree)"
	}
	return fmt.Sprintf("%d cores (%s), %.1f GiB, Linux %s, %s %s, load average at start %s, commit %s%s",
		m.Cores, m.CPU, m.MemoryGiB, m.Kernel, m.GoVersion, m.OS, m.Load, m.GitCommit, dirty)
}

// printText writes the table for a terminal.
func (r *Report) printText(w io.Writer) {
	fmt.Fprintf(w, "\nelector-bench: ours = elector-sidecar; ratio = ours / baseline\n")
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	for _, s := range r.Sections {
		fmt.Fprintf(w, "\n%s  [%s; %.0fs]\n", s.Title, s.Setup, s.Seconds)
		if s.Error != "" {
			fmt.Fprintf(w, "  ERROR: %s\n", s.Error)
		}
		if len(s.Rows) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  metric\tours\t%s\tratio\tgoal\tmet\n", s.Baseline)
		for _, row := range s.Rows {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", row.Metric, row.Ours, row.Baseline, row.Ratio, row.Goal, row.Met)
		}
		_ = tw.Flush()
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	fmt.Fprintf(w, "\nGoals\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  section\tmetric\tgoal\tissue\tmet\n")
	for _, g := range goals {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", g.Section, g.Metric, g.Text, g.Issue, r.goalVerdict(g))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\ntotal %.0fs\n", r.Seconds)
}

// markdown returns the tables as Markdown.
func (r *Report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `%s`  \n", r.Command)
	fmt.Fprintf(&b, "Started %s, took %.0f s.  \n", r.Started.Format(time.RFC3339), r.Seconds)
	fmt.Fprintf(&b, "Machine: %s.  \n", r.Machine)
	fmt.Fprintf(&b, "Ratio = ours / baseline (below 1 is better for latencies, load and size; above 1 is better for throughput).\n")
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "\n#### %s\n\n%s.", s.Title, s.Setup)
		fmt.Fprintf(&b, " Took %.0f s.\n\n", s.Seconds)
		if s.Error != "" {
			fmt.Fprintf(&b, "**Error:** %s\n\n", s.Error)
		}
		if len(s.Rows) > 0 {
			fmt.Fprintf(&b, "| metric | ours | %s | ratio | goal | met |\n|---|---:|---:|---:|---|---|\n", s.Baseline)
			for _, row := range s.Rows {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", mdEscape(row.Metric), mdEscape(row.Ours), mdEscape(row.Baseline), row.Ratio, mdEscape(row.Goal), row.Met)
			}
		}
		if len(s.Notes) > 0 {
			b.WriteString("\n")
			for _, n := range s.Notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
		}
	}
	fmt.Fprintf(&b, "\n#### Goals\n\n%s", goalsMarkdown(r))
	return b.String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func (r *Report) json() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// ratio formats ours/base; "n/a" when it means nothing.
func ratio(ours, base float64) string {
	if base == 0 || math.IsNaN(ours) || math.IsNaN(base) || ours < 0 || base < 0 {
		return "n/a"
	}
	r := ours / base
	switch {
	case r == 0:
		return "0"
	case r < 0.01:
		return fmt.Sprintf("%.4f", r)
	case r < 0.1:
		return fmt.Sprintf("%.3f", r)
	default:
		return fmt.Sprintf("%.2f", r)
	}
}

func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

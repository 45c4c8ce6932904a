package main

import (
	"strings"
	"testing"
	"time"
)

func TestCheckHistoryReportsATokenDecreaseAsAViolation(t *testing.T) {
	tests := []struct {
		name string
		rows []historyRow
		want []string // substrings, one per violation
	}{
		{name: "empty", rows: nil},
		{name: "one row", rows: []historyRow{{ID: "1", Token: 3}}},
		{name: "equal tokens repeat (one leader writes many times)", rows: []historyRow{{ID: "1", Token: 1}, {ID: "2", Token: 1}, {ID: "3", Token: 2}, {ID: "4", Token: 2}}},
		{name: "tokens jump up", rows: []historyRow{{ID: "1", Token: 1}, {ID: "2", Token: 7}, {ID: "3", Token: 9}}},
		{
			name: "a lower token after a higher one",
			rows: []historyRow{{ID: "1", Token: 1}, {ID: "2", Token: 3}, {ID: "3", Token: 2, Writer: "cand-1"}, {ID: "4", Token: 3}},
			want: []string{"history row 3 (id 3) by cand-1 has token 2 after token 3 (row id 2)"},
		},
		{
			name: "every row below the highest so far is reported, against the highest",
			rows: []historyRow{{ID: "a", Token: 5}, {ID: "b", Token: 4}, {ID: "c", Token: 4}, {ID: "d", Token: 6}, {ID: "e", Token: 5}},
			want: []string{"row 2 (id b) has token 4 after token 5 (row id a)", "row 3 (id c) has token 4 after token 5", "row 5 (id e) has token 5 after token 6 (row id d)"},
		},
		{
			name: "a decrease to zero right after the first row",
			rows: []historyRow{{ID: "1", Token: 2}, {ID: "2", Token: 0}},
			want: []string{"has token 0 after token 2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkHistory(tt.rows)
			if len(got) != len(tt.want) {
				t.Fatalf("checkHistory = %q, want %d violation(s) %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestReconcileExplainsTheGapBetweenHistoryAndAcceptedWrites(t *testing.T) {
	tests := []struct {
		name                          string
		history, server, writer, errs int64
		wantLost, wantUnknown         int64
		wantProblems                  []string
	}{
		{name: "every accepted write recorded, no errors", history: 100, server: 100, writer: 100},
		{name: "a reply lost after the commit (writer timed out)", history: 100, server: 100, writer: 99, errs: 3, wantLost: 1},
		{name: "a commit whose reply the store lost in a restart", history: 101, server: 100, writer: 100, errs: 4, wantUnknown: 1},
		{name: "gap exactly the errors", history: 105, server: 102, writer: 100, errs: 5, wantLost: 2, wantUnknown: 3},
		{
			name: "an accepted write missing from the database", history: 99, server: 100, writer: 100,
			wantLost: 0, wantUnknown: -1,
			wantProblems: []string{"1 accepted writes are missing", "HTTP store saw 100 commits succeed"},
		},
		{
			name: "more rows than accepted writes and errors", history: 110, server: 100, writer: 100, errs: 2,
			wantUnknown:  10,
			wantProblems: []string{"10 rows more than the writers saw accepted, but only 2 writes ended in an error"},
		},
		{
			name: "writers saw more accepted than the store committed", history: 100, server: 99, writer: 100,
			wantLost: -1, wantUnknown: 1,
			wantProblems: []string{"the writers saw 100 writes accepted but the HTTP store committed only 99"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, problems := reconcile(tt.history, tt.server, tt.writer, tt.errs)
			if r.LostReplies != tt.wantLost || r.Unknown != tt.wantUnknown {
				t.Errorf("lost replies %d, unknown %d; want %d, %d", r.LostReplies, r.Unknown, tt.wantLost, tt.wantUnknown)
			}
			if len(problems) != len(tt.wantProblems) {
				t.Fatalf("problems = %q, want %q", problems, tt.wantProblems)
			}
			for i, w := range tt.wantProblems {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, problems[i], w)
				}
			}
		})
	}
}

func TestParseFlagsAcceptsOnlyKnownStores(t *testing.T) {
	tests := []struct {
		args    []string
		want    string
		wantErr string
	}{
		{args: nil, want: storeMemory},
		{args: []string{"--store=memory"}, want: storeMemory},
		{args: []string{"--store", "postgres"}, want: storePostgres},
		{args: []string{"--store=redis", "--duration=30s"}, want: storeRedis},
		{args: []string{"--store=mysql"}, wantErr: `--store "mysql": want one of memory, postgres, redis`},
		{args: []string{"--store="}, wantErr: `--store "": want one of`},
		{args: []string{"--store=Redis"}, wantErr: `--store "Redis"`},
		{args: []string{"--store=redis", "extra"}, wantErr: "no arguments"},
		{args: []string{"--store=redis", "--candidates=2"}, wantErr: "--candidates >= 3"},
		{args: []string{"--stor=redis"}, wantErr: "flag provided but not defined: -stor"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v, want it to contain %q", tt.args, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q is not one line", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tt.args, err)
			}
			if o.store != tt.want {
				t.Errorf("store = %q, want %q", o.store, tt.want)
			}
		})
	}
}

func TestRestartWindowsTellErrorsDuringARestartApart(t *testing.T) {
	var w restartWindows
	t0 := time.Now()
	if w.overlaps(t0.Add(-time.Second), t0) {
		t.Fatal("no restart yet, but a write overlaps one")
	}
	i := w.begin()
	begin := time.Now()
	if !w.overlaps(begin.Add(-time.Second), begin.Add(time.Millisecond)) {
		t.Error("a write ending while the restart is in progress does not overlap it")
	}
	w.end(i)
	end := time.Now()
	if !w.overlaps(end.Add(restartGrace/2), end.Add(restartGrace/2+time.Millisecond)) {
		t.Error("a write within the grace after the restart does not count as during it")
	}
	if w.overlaps(end.Add(restartGrace+time.Second), end.Add(restartGrace+2*time.Second)) {
		t.Error("a write well after the restart counts as during it")
	}
	if w.overlaps(begin.Add(-3*time.Second), begin.Add(-2*time.Second)) {
		t.Error("a write that ended before the restart counts as during it")
	}
}

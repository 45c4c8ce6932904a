package framework

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// at builds a sample from millisecond offsets.
func at(target string, sent, recv int, status int, token int64) Sample {
	t0 := time.Unix(1000, 0)
	return Sample{Target: target, TokenResult: TokenResult{
		Status: status, Token: token,
		Sent: t0.Add(time.Duration(sent) * time.Millisecond), Received: t0.Add(time.Duration(recv) * time.Millisecond),
	}}
}

const ok, no = http.StatusOK, http.StatusConflict

func TestTermsOf(t *testing.T) {
	samples := []Sample{
		at("a", 0, 1, ok, 1), at("a", 10, 11, ok, 1), at("a", 20, 21, no, 0), at("a", 30, 31, ok, 1),
		at("a", 40, 41, ok, 2), at("b", 5, 6, no, 0), at("b", 50, 52, ok, 3),
	}
	terms := TermsOf(samples)
	want := []struct {
		target string
		token  int64
		count  int
	}{{"a", 1, 2}, {"a", 1, 1}, {"a", 2, 1}, {"b", 3, 1}}
	if len(terms) != len(want) {
		t.Fatalf("got %d terms %+v, want %d", len(terms), terms, len(want))
	}
	for i, w := range want {
		if terms[i].Target != w.target || terms[i].Token != w.token || terms[i].Count != w.count {
			t.Fatalf("term %d = %+v, want %+v", i, terms[i], w)
		}
	}
}

// TestCheckNoOverlapFailsOnlyWhatTheCallsProve: an overlap is a violation
// ("definite") when no delays of the calls can order the two terms; windows
// that merely intersect ("possible") are reported apart, not as violations.
func TestCheckNoOverlapFailsOnlyWhatTheCallsProve(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name    string
		samples []Sample
		want    string // "" nothing, "definite" a violation, "possible" a possible overlap only
	}{
		{"disjoint", []Sample{at("a", 0, 2, ok, 1), at("a", 10, 12, ok, 1), at("b", 13, 15, ok, 2)}, ""},
		{"same process", []Sample{at("a", 0, 20, ok, 1), at("a", 5, 25, ok, 2)}, ""},
		{"refusals overlap fine", []Sample{at("a", 0, 20, ok, 1), at("b", 5, 25, no, 0)}, ""},
		{"slow response overlaps next leader", []Sample{at("a", 0, 30, ok, 1), at("b", 10, 12, ok, 2)}, "possible"},
		{"both proven at once", []Sample{at("a", 0, 1, ok, 1), at("a", 20, 21, ok, 1), at("b", 5, 6, ok, 2), at("b", 25, 26, ok, 2)}, "definite"},
		{"paused process answers after takeover", []Sample{at("a", 0, 1, ok, 1), at("b", 100, 101, ok, 2), at("a", 50, 120, ok, 1)}, "possible"},
		{"paused process answers after takeover's answer came back", []Sample{at("a", 0, 1, ok, 1), at("b", 100, 101, ok, 2), at("a", 110, 120, ok, 1)}, "definite"},
		{"one answer inside another's proven term", []Sample{at("a", 0, 1, ok, 1), at("a", 40, 41, ok, 1), at("b", 10, 12, ok, 2)}, "definite"},
		{"two single answers can always be ordered", []Sample{at("a", 0, 30, ok, 1), at("b", 5, 25, ok, 2)}, "possible"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, possible := CheckNoOverlap(TermsOf(tt.samples), start)
			var got []Violation
			switch tt.want {
			case "definite":
				got = vs
			case "possible":
				got = possible
			}
			if len(vs)+len(possible) != len(got) || (tt.want != "" && (len(got) != 1 || !strings.Contains(got[0].Detail, "("+tt.want+")"))) {
				t.Fatalf("violations %v, possible %v; want %q", vs, possible, tt.want)
			}
		})
	}
}

func TestCheckTokenOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name    string
		samples []Sample
		bad     int
	}{
		{"increasing", []Sample{at("a", 0, 1, ok, 1), at("b", 10, 11, ok, 2), at("a#2", 20, 21, ok, 5)}, 0},
		{"same process keeps its token after a blip", []Sample{at("a", 0, 1, ok, 3), at("a", 5, 6, no, 0), at("a", 10, 11, ok, 3)}, 0},
		{"new process reuses a token", []Sample{at("a", 0, 1, ok, 3), at("a#2", 10, 11, ok, 3)}, 1},
		{"token goes down", []Sample{at("a", 0, 1, ok, 4), at("b", 10, 11, ok, 2), at("c", 20, 21, ok, 3)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if vs := CheckTokenOrder(TermsOf(tt.samples), start); len(vs) != tt.bad {
				t.Fatalf("violations %v, want %d", vs, tt.bad)
			}
		})
	}
}

func TestLineWriter(t *testing.T) {
	var got []string
	w := NewLineWriter(func(l string) { got = append(got, l) })
	_, _ = w.Write([]byte("one\ntw"))
	_, _ = w.Write([]byte("o\n\nthree"))
	if strings.Join(got, "|") != "one|two|" {
		t.Fatalf("lines %q", got)
	}
}

// uidAt is at with the Lease UID the token was served under.
func uidAt(target string, sent, recv int, status int, token int64, uid string) Sample {
	s := at(target, sent, recv, status, token)
	s.LeaseUID = uid
	return s
}

func TestCheckDistinctTokens(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name    string
		samples []Sample
		want    []string // substrings of each violation's detail, in order
	}{
		{"each token one process", []Sample{uidAt("a", 0, 1, ok, 1, "u1"), uidAt("b", 10, 11, ok, 2, "u1"), uidAt("a#2", 20, 21, ok, 3, "u2")}, nil},
		{"same process keeps its token after a blip", []Sample{uidAt("a", 0, 1, ok, 3, "u1"), at("a", 5, 6, no, 0), uidAt("a", 10, 11, ok, 3, "u1")}, nil},
		{"refusals carry no token", []Sample{uidAt("a", 0, 1, ok, 3, "u1"), at("b", 5, 6, no, 3), at("c", 5, 6, http.StatusServiceUnavailable, 3)}, nil},
		{"same token under two Lease UIDs, at once", []Sample{
			uidAt("b", 0, 1, ok, 5, "old"), uidAt("c", 2, 3, ok, 5, "new"), uidAt("b", 10, 11, ok, 5, "old"), uidAt("c", 12, 13, ok, 5, "new"),
		}, []string{"token 5 served by 2 processes: b (Lease UID old, [+0ms..+11ms], 2 samples) and c (Lease UID new, [+2ms..+13ms], 2 samples)"}},
		{"restarted process serves its predecessor's token later", []Sample{uidAt("a#1", 0, 1, ok, 4, "u"), uidAt("b", 10, 11, ok, 6, "u"), uidAt("a#2", 20, 21, ok, 4, "u")},
			[]string{"token 4 served by 2 processes: a#1 (Lease UID u, [+0ms..+1ms], 1 samples) and a#2"}},
		{"every duplicated value is reported once, lowest first", []Sample{
			uidAt("a", 0, 1, ok, 2, "u"), uidAt("b", 5, 6, ok, 2, "v"), uidAt("c", 7, 8, ok, 2, "w"), uidAt("a", 9, 10, ok, 1, "u"), uidAt("b", 11, 12, ok, 1, "v"),
		}, []string{"token 1 served by 2 processes", "token 2 served by 3 processes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CheckDistinctTokens(tt.samples, start)
			if len(vs) != len(tt.want) {
				t.Fatalf("violations %v, want %d", vs, len(tt.want))
			}
			for i, w := range tt.want {
				if vs[i].Kind != "same-token" || !strings.Contains(vs[i].Detail, w) {
					t.Fatalf("violation %d = %v, want kind same-token containing %q", i, vs[i], w)
				}
			}
		})
	}
}

func TestSamplerCheckReportsATokenValueServedByTwoProcesses(t *testing.T) {
	s := &Sampler{Start: time.Unix(1000, 0)}
	s.samples = []Sample{uidAt("a", 0, 1, ok, 7, "u1"), uidAt("b", 10, 11, ok, 8, "u1")}
	if err := s.Check(); err != nil {
		t.Fatalf("distinct tokens: %v", err)
	}
	s.samples = append(s.samples, uidAt("c", 20, 21, ok, 8, "u2"))
	err := s.Check()
	if err == nil || !strings.Contains(err.Error(), "same-token") || !strings.Contains(err.Error(), "terms:") {
		t.Fatalf("err = %v, want the duplicated token value and the terms", err)
	}
}

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

func TestCheckNoOverlap(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name    string
		samples []Sample
		want    string // "" no violation, else "possible" or "definite"
	}{
		{"disjoint", []Sample{at("a", 0, 2, ok, 1), at("a", 10, 12, ok, 1), at("b", 13, 15, ok, 2)}, ""},
		{"same process", []Sample{at("a", 0, 20, ok, 1), at("a", 5, 25, ok, 2)}, ""},
		{"refusals overlap fine", []Sample{at("a", 0, 20, ok, 1), at("b", 5, 25, no, 0)}, ""},
		{"slow response overlaps next leader", []Sample{at("a", 0, 30, ok, 1), at("b", 10, 12, ok, 2)}, "possible"},
		{"both proven at once", []Sample{at("a", 0, 1, ok, 1), at("a", 20, 21, ok, 1), at("b", 5, 6, ok, 2), at("b", 25, 26, ok, 2)}, "definite"},
		{"paused process answers after takeover", []Sample{at("a", 0, 1, ok, 1), at("b", 100, 101, ok, 2), at("a", 50, 120, ok, 1)}, "possible"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CheckNoOverlap(TermsOf(tt.samples), start)
			if tt.want == "" {
				if len(vs) != 0 {
					t.Fatalf("violations %v, want none", vs)
				}
				return
			}
			if len(vs) != 1 || !strings.Contains(vs[0].Detail, "("+tt.want+")") {
				t.Fatalf("violations %v, want one %s", vs, tt.want)
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

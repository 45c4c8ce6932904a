package framework

import (
	"strings"
	"testing"
	"time"
)

// claimAt is a valid sample with expiresInMs.
func claimAt(target string, sent, recv int, token, expiresInMs int64) Sample {
	s := at(target, sent, recv, ok, token)
	s.ExpiresInMs = expiresInMs
	return s
}

func releaseAt(target string, sent, recv int) ReleaseCall {
	t0 := time.Unix(1000, 0)
	return ReleaseCall{Target: target, Sent: t0.Add(time.Duration(sent) * time.Millisecond), Received: t0.Add(time.Duration(recv) * time.Millisecond)}
}

func TestCheckClaims(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name     string
		samples  []Sample
		releases []ReleaseCall
		want     string // "" no violation, else "possible" or "definite"
	}{
		{"next leader after the claim", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("b", 2000, 2001, 2, 2800)}, nil, ""},
		{"next leader inside the claim", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("b", 1500, 1501, 2, 2800)}, nil, "definite"},
		{"served while the claim ran out", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("b", 1999, 2003, 2, 2800)}, nil, "possible"},
		{"a later answer extends the claim", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("a", 1000, 1001, 1, 2000), claimAt("b", 2500, 2501, 2, 2800)}, nil, "definite"},
		{"refusals claim nothing", []Sample{claimAt("a", 0, 1, 1, 100), at("a", 50, 51, no, 0), claimAt("b", 200, 201, 2, 2800)}, nil, ""},
		{"a lower token served after a higher one", []Sample{claimAt("a", 0, 1, 5, 2000), claimAt("b", 100, 101, 4, 2800)}, nil, "definite"},
		{"an earlier lower token claims nothing over a later higher one's", []Sample{claimAt("b", 0, 1, 4, 50), claimAt("a", 100, 101, 5, 2000)}, nil, ""},
		{"the same process keeps its claims", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("a", 100, 101, 2, 2800)}, nil, ""},
		{"a release ends the claims at its sending", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("b", 600, 601, 2, 2800)}, []ReleaseCall{releaseAt("a", 500, 520)}, ""},
		{"after the release sent", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("b", 450, 451, 2, 2800)}, []ReleaseCall{releaseAt("a", 500, 520)}, "definite"},
		{"an answer while the release was in flight", []Sample{claimAt("a", 505, 506, 1, 2000), claimAt("b", 530, 531, 2, 2800)}, []ReleaseCall{releaseAt("a", 500, 520)}, ""},
		{"another process's release ends nothing", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("b", 600, 601, 2, 2800)}, []ReleaseCall{releaseAt("c", 500, 520)}, "definite"},
		{"a term after the release claims again", []Sample{claimAt("a", 0, 1, 1, 2000), claimAt("a", 3000, 3001, 3, 2000), claimAt("b", 4000, 4001, 4, 2800)}, []ReleaseCall{releaseAt("a", 500, 520)}, "definite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CheckClaims(tt.samples, tt.releases, start)
			if tt.want == "" {
				if len(vs) != 0 {
					t.Fatalf("violations %v, want none", vs)
				}
				return
			}
			if len(vs) != 1 || vs[0].Kind != "claim" || !strings.Contains(vs[0].Detail, "("+tt.want+")") {
				t.Fatalf("violations %v, want one %s claim violation", vs, tt.want)
			}
		})
	}
}

func TestClaimEnd(t *testing.T) {
	a := claimAt("a", 100, 101, 1, 2000)
	t0 := time.Unix(1000, 0)
	for _, tt := range []struct {
		name     string
		releases []ReleaseCall
		want     int
	}{
		{"no release", nil, 2100},
		{"a release before the answer", []ReleaseCall{releaseAt("a", 10, 20)}, 2100},
		{"the first release after the answer", []ReleaseCall{releaseAt("a", 900, 910), releaseAt("a", 500, 510)}, 500},
		{"a release after the claim", []ReleaseCall{releaseAt("a", 3000, 3010)}, 2100},
		{"the release in flight when the answer was asked", []ReleaseCall{releaseAt("a", 90, 110)}, 100},
	} {
		if got := ClaimEnd(a, tt.releases); !got.Equal(t0.Add(time.Duration(tt.want) * time.Millisecond)) {
			t.Errorf("%s: ClaimEnd = %s, want +%dms", tt.name, rel(got, t0), tt.want)
		}
	}
}

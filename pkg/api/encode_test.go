package api

import (
	"encoding/json"
	"testing"
)

func TestAppendStringEscapes(t *testing.T) {
	for _, s := range []string{"plain", `quo"te`, "back\\slash", "tab\t", "ünï", "<tag>&", ""} {
		var got string
		if err := json.Unmarshal(appendString(nil, s), &got); err != nil || got != s {
			t.Fatalf("appendString(%q) = %s (%v)", s, appendString(nil, s), err)
		}
	}
}

// TestLeaderEncoderSplitsBeforeTheExpiry: AppendJSONUntilExpiry followed by
// AppendExpiry is AppendJSON, with and without expiresInMs.
func TestLeaderEncoderSplitsBeforeTheExpiry(t *testing.T) {
	healthy := true
	for _, r := range []LeaderResponse{
		{IsLeader: true, Holder: "a", Identity: "a", Lease: "ns/l", LeaseTransitions: 3, Ready: true, Candidate: true, Token: 3, ExpiresInMs: 14630, AppHealthy: &healthy},
		{IsLeader: true, Holder: "a", Identity: "a", Lease: "ns/l", Token: 3},
		{Holder: "b", Identity: "a", Lease: "ns/l", NotCandidate: "released for 4m59s"},
	} {
		whole := string(r.AppendJSON(nil))
		split := string(AppendExpiry(r.AppendJSONUntilExpiry(nil), r.ExpiresInMs))
		std, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if whole != split || whole != string(std) {
			t.Fatalf("AppendJSON %s, split %s, encoding/json %s", whole, split, std)
		}
	}
}

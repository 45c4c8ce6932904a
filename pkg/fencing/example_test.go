package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// The README's "Fencing at the resource" snippet is the part of this
// example between the README markers (TestReadmeFencingSnippetIsTheExample).
func ExampleFence_WriteToken() {
	ctx := context.Background()
	var t localapi.TokenResponse // the /token answer of a pod that leads
	t.Token, t.LeaseUID = 7, "4f0c9b52"
	// README begin
	f := fencing.New(fencing.NewMemory())                      // or your Store: a SQL row with a version column, an etcd key, ...
	tok := fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID} // t: the /token answer
	err := f.WriteToken(ctx, tok, []byte("value"))
	if errors.Is(err, fencing.ErrStaleToken) { // *fencing.StaleTokenError{Token, Highest, LeaseUID, HighestLeaseUID}
		// a newer leader has written (or this value came from another Lease): this process is stale and must stop
	}
	// README end
	fmt.Println("first write:", err)
	err = f.WriteToken(ctx, fencing.Token{Value: 7, LeaseUID: "another-lease"}, []byte("late"))
	fmt.Println("same value, other Lease, stale:", errors.Is(err, fencing.ErrStaleToken))
	err = f.Write(ctx, 6, []byte("older"))
	fmt.Println("lower value, stale:", errors.Is(err, fencing.ErrStaleToken))
	// Output:
	// first write: <nil>
	// same value, other Lease, stale: true
	// lower value, stale: true
}

func TestReadmeFencingSnippetIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Fencing at the resource")
	if !ok {
		t.Fatal("README has no \"Fencing at the resource\" section")
	}
	_, block, _ := strings.Cut(section, "```go\n")
	block, _, _ = strings.Cut(block, "```")
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, example, _ := strings.Cut(string(src), "// README begin\n")
	example, _, _ = strings.Cut(example, "\t// README end")
	if got, want := normalize(block), normalize(example); got != want {
		t.Fatalf("README snippet differs from ExampleFence_WriteToken:\nREADME:\n%s\nexample:\n%s", got, want)
	}
}

// normalize compares code, not layout: white space runs (gofmt's comment
// alignment, the example's indentation) count as one space.
func normalize(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

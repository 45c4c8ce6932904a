package fences

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	pgfence "github.com/elector-sidecar/elector-sidecar/pkg/fencing/postgres"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// pgReadmeGo is the README's "Fencing in PostgreSQL" Go snippet (the part
// between the markers; TestPostgresReadmeSnippetsRunAsWritten checks they
// are the same code). stale reports whether the snippet's stale branch ran.
func pgReadmeGo(ctx context.Context, url string, t localapi.TokenResponse) (stale bool, _ error) {
	// README begin
	pool, err := pgxpool.New(ctx, url) // url: "postgres://user@host:5432/db"
	if err != nil {
		return false, err
	}
	if err := pgfence.Migrate(ctx, pool); err != nil { // once, at setup: the elector_fence* tables, elector_fence()
		return false, err
	}
	fence := pgfence.New(pool)                                 // READ COMMITTED; pgfence.WithIsolation(pgx.Serializable) also holds
	tok := fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID} // t: the /token answer
	err = fence.Do(ctx, "orders", tok, "pod-a", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE orders SET state = 'billed' WHERE id = $1", 42)
		return err
	})
	if errors.Is(err, fencing.ErrStaleToken) { // *fencing.StaleTokenError: Highest is the token PostgreSQL holds; nothing committed
		// a newer leader has written: this process is stale and must stop
		stale = true
	}
	// README end
	pool.Close()
	return stale, err
}

func pgReadmeSection(t *testing.T) []framework.CodeBlock {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []framework.CodeBlock
	for _, b := range framework.MarkdownCodeBlocks(string(readme)) {
		if b.Under("Fencing in PostgreSQL") {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != 2 || blocks[0].Lang != "go" || blocks[1].Lang != "sql" {
		t.Fatalf("README's \"Fencing in PostgreSQL\" has %d blocks, want a go and a sql block", len(blocks))
	}
	return blocks
}

// Both snippets of "Fencing in PostgreSQL" run against a real PostgreSQL:
// the Go one as the function above, the SQL one through psql, a client in
// another language than Go, with the token the README shows and with a stale
// one, whose error must be the one the README quotes.
func TestPostgresReadmeSnippetsRunAsWritten(t *testing.T) {
	blocks := pgReadmeSection(t)
	src, err := os.ReadFile("postgres_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, snippet, _ := strings.Cut(string(src), "// README begin\n")
	snippet, _, _ = strings.Cut(snippet, "\t// README end")
	snippet = strings.Replace(snippet, "\t\tstale = true\n", "", 1)
	snippet = strings.ReplaceAll(snippet, "return false, err", "return err")
	if got, want := pgNormalize(blocks[0].Code), pgNormalize(snippet); got != want {
		t.Fatalf("README %s differs from pgReadmeGo:\nREADME:\n%s\ntest:\n%s", blocks[0].Where(), got, want)
	}

	srv := dbserver.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	state := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, "SELECT state FROM orders WHERE id = 42").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	reset := func() {
		t.Helper()
		if _, err := conn.Exec(ctx, "UPDATE orders SET state = 'new' WHERE id = 42"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY, state text NOT NULL); INSERT INTO orders VALUES (42, 'new')"); err != nil {
		t.Fatal(err)
	}

	t.Run("go", func(t *testing.T) {
		stale, err := pgReadmeGo(ctx, srv.URL, localapi.TokenResponse{Token: 7, LeaseUID: "4f0c9b52"})
		if err != nil || stale || state() != "billed" {
			t.Fatalf("token 7: stale %v, %v, state %q", stale, err, state())
		}
		reset()
		stale, err = pgReadmeGo(ctx, srv.URL, localapi.TokenResponse{Token: 6, LeaseUID: "4f0c9b52"})
		if !stale || state() != "new" {
			t.Fatalf("token 6 after 7: stale %v (%v), state %q", stale, err, state())
		}
	})

	t.Run("sql through psql", func(t *testing.T) {
		binDir, err := dbserver.PostgresBinDir()
		if err != nil {
			t.Fatal(err)
		}
		psql := func(sql string) (string, error) {
			cmd := exec.Command(filepath.Join(binDir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", srv.URL)
			cmd.Stdin = strings.NewReader(sql)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		reset()
		code := blocks[1].Code
		if out, err := psql(code); err != nil || state() != "billed" {
			t.Fatalf("the README's SQL: %v, state %q\n%s", err, state(), out)
		}
		reset()
		staleCode := strings.Replace(code, "elector_fence('orders', 7,", "elector_fence('orders', 6,", 1)
		if staleCode == code {
			t.Fatal("the README's SQL has no elector_fence('orders', 7, ...)")
		}
		out, err := psql(staleCode)
		if err == nil || state() != "new" {
			t.Fatalf("with token 6: %v, state %q\n%s", err, state(), out)
		}
		// The README's comment quotes the error: psql prints the same line.
		_, quoted, ok := strings.Cut(code, "-- with a stale token (6): ")
		quoted, _, _ = strings.Cut(quoted, "\n")
		if !ok || !strings.Contains(out, quoted) {
			t.Fatalf("psql printed\n%s\nthe README quotes %q", out, quoted)
		}
		_, detail, _ := strings.Cut(code, "DETAIL: ")
		detail, _, _ = strings.Cut(detail, ")")
		var stored fencing.Token
		stored, err = pgfence.New(conn).Stored(ctx, "orders")
		if err != nil || detail != "token=6 stored=7 stored_lease_uid="+stored.LeaseUID || stored.Value != 7 {
			t.Fatalf("the README's DETAIL %q, stored %+v (%v)", detail, stored, err)
		}
	})
}

// pgNormalize compares code, not layout (gofmt's comment alignment and the
// function's indentation).
func pgNormalize(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

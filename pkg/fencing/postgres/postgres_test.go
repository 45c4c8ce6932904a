package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// The Go side only: the fence against a real PostgreSQL is tested in
// test/fences.

// countingDB fails the test's claim "no SQL" by counting every transaction.
type countingDB struct{ begins int }

func (d *countingDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	d.begins++
	return nil, errors.New("countingDB: no database here")
}

func TestBadInputIsRejectedBeforeAnySQL(t *testing.T) {
	ok := func(pgx.Tx) error { return nil }
	tests := []struct {
		name    string
		opts    []Option
		nilDB   bool
		call    func(f *Fence) error
		wantMsg string
	}{
		{name: "empty resource", call: func(f *Fence) error { return f.Do(context.Background(), "", fencing.Token{Value: 1}, "", ok) }, wantMsg: "empty resource name"},
		{name: "negative token", call: func(f *Fence) error { return f.Do(context.Background(), "orders", fencing.Token{Value: -1}, "", ok) }, wantMsg: "fencing token -1 for resource \"orders\" is negative"},
		{name: "most negative token", call: func(f *Fence) error {
			return f.Do(context.Background(), "orders", fencing.Token{Value: math.MinInt64}, "", ok)
		}, wantMsg: "is negative"},
		{name: "NUL in the resource", call: func(f *Fence) error { return f.Do(context.Background(), "ord\x00ers", fencing.Token{Value: 1}, "", ok) }, wantMsg: "resource name"},
		{name: "invalid UTF-8 lease UID", call: func(f *Fence) error {
			return f.Do(context.Background(), "orders", fencing.Token{Value: 1, LeaseUID: "\xff"}, "", ok)
		}, wantMsg: "lease UID"},
		{name: "NUL in the holder", call: func(f *Fence) error {
			return f.Do(context.Background(), "orders", fencing.Token{Value: 1}, "pod\x00a", ok)
		}, wantMsg: "holder"},
		{name: "nil function", call: func(f *Fence) error { return f.Do(context.Background(), "orders", fencing.Token{Value: 1}, "", nil) }, wantMsg: "nil function"},
		{name: "nil database", nilDB: true, call: func(f *Fence) error { return f.Do(context.Background(), "orders", fencing.Token{Value: 1}, "", ok) }, wantMsg: "nil database"},
		{name: "zero attempts", opts: []Option{WithMaxAttempts(0)}, call: func(f *Fence) error {
			return f.Do(context.Background(), "orders", fencing.Token{Value: 1}, "", ok)
		}, wantMsg: "max attempts 0"},
		{name: "unknown isolation level", opts: []Option{WithIsolation("snapshot")}, call: func(f *Fence) error {
			return f.Do(context.Background(), "orders", fencing.Token{Value: 1}, "", ok)
		}, wantMsg: `unknown isolation level "snapshot"`},
		{name: "store: empty resource", call: func(f *Fence) error { _, _, _, err := f.Store("", "w").Load(context.Background()); return err }, wantMsg: "empty resource name"},
		{name: "store: negative token", call: func(f *Fence) error {
			return f.Store("orders", "w").Commit(context.Background(), "0", fencing.Token{Value: -3}, nil)
		}, wantMsg: "is negative"},
		{name: "store: version not from Load", call: func(f *Fence) error {
			return f.Store("orders", "w").Commit(context.Background(), "v1", fencing.Token{Value: 3}, nil)
		}, wantMsg: `version "v1"`},
		{name: "history of a badly built fence", nilDB: true, call: func(f *Fence) error { _, err := f.History(context.Background(), "orders"); return err }, wantMsg: "nil database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := &countingDB{}
			var f *Fence
			if tt.nilDB {
				f = New(nil, tt.opts...)
			} else {
				f = New(db, tt.opts...)
			}
			err := tt.call(f)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v, want ErrInvalid with %q", err, tt.wantMsg)
			}
			if db.begins != 0 {
				t.Fatalf("%d transactions begun for bad input", db.begins)
			}
		})
	}
}

func TestValidIsolationLevelsAreAccepted(t *testing.T) {
	for _, level := range []pgx.TxIsoLevel{"", pgx.ReadCommitted, pgx.ReadUncommitted, pgx.RepeatableRead, pgx.Serializable} {
		db := &countingDB{}
		err := New(db, WithIsolation(level)).Do(context.Background(), "orders", fencing.Token{Value: 1}, "", func(pgx.Tx) error { return nil })
		if errors.Is(err, ErrInvalid) || db.begins != 1 {
			t.Fatalf("isolation %q: got %v after %d transactions, want the database's error after 1", level, err, db.begins)
		}
	}
}

func TestParseErrorMapsTheFenceSQLSTATEs(t *testing.T) {
	tok := fencing.Token{Value: 6, LeaseUID: "b"}
	tests := []struct {
		name string
		err  error
		want func(t *testing.T, got error)
	}{
		{"stale names the stored token and its UID", &pgconn.PgError{Code: CodeStaleToken, Message: "stale", Detail: "token=6 stored=7 stored_lease_uid=a"},
			func(t *testing.T, got error) {
				var ste *fencing.StaleTokenError
				if !errors.As(got, &ste) || !errors.Is(got, fencing.ErrStaleToken) {
					t.Fatalf("got %v, want a *fencing.StaleTokenError", got)
				}
				if want := (fencing.StaleTokenError{Token: 6, Highest: 7, LeaseUID: "b", HighestLeaseUID: "a"}); *ste != want {
					t.Fatalf("got %#v, want %#v", *ste, want)
				}
			}},
		{"stale with an unknown stored UID, one with spaces kept whole", &pgconn.PgError{Code: CodeStaleToken, Detail: "token=6 stored=6 stored_lease_uid=a b"},
			func(t *testing.T, got error) {
				var ste *fencing.StaleTokenError
				if !errors.As(got, &ste) || ste.Highest != 6 || ste.HighestLeaseUID != "a b" {
					t.Fatalf("got %#v", got)
				}
			}},
		{"malformed stale detail is not a stale token", &pgconn.PgError{Code: CodeStaleToken, Detail: "stored=x"},
			func(t *testing.T, got error) {
				if errors.Is(got, fencing.ErrStaleToken) || !strings.Contains(got.Error(), "malformed") {
					t.Fatalf("got %v", got)
				}
			}},
		{"invalid input", &pgconn.PgError{Code: CodeInvalidInput, Message: "fence: invalid resource name: must not be empty"},
			func(t *testing.T, got error) {
				if !errors.Is(got, ErrInvalid) || !strings.Contains(got.Error(), "must not be empty") {
					t.Fatalf("got %v", got)
				}
			}},
		{"other errors pass through", fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40001"}),
			func(t *testing.T, got error) {
				if !IsSerializationFailure(got) || errors.Is(got, fencing.ErrStaleToken) || errors.Is(got, ErrInvalid) {
					t.Fatalf("got %v", got)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.want(t, ParseError(tt.err, tok)) })
	}
	if ParseError(nil, tok) != nil {
		t.Fatal("ParseError(nil) != nil")
	}
}

func TestMigrationDefinesTheDocumentedSchema(t *testing.T) {
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS elector_fence (",
		"CREATE TABLE IF NOT EXISTS elector_fence_history (",
		"CREATE TABLE IF NOT EXISTS elector_fence_settings (",
		"CREATE OR REPLACE FUNCTION elector_fence(resource text, token bigint, lease_uid text DEFAULT NULL, holder text DEFAULT NULL)",
		"pg_advisory_xact_lock_shared(",
		"ON CONFLICT (resource) DO UPDATE",
		"ERRCODE = '" + CodeStaleToken + "'",
		"ERRCODE = '" + CodeInvalidInput + "'",
	} {
		if !strings.Contains(Migration, want) {
			t.Errorf("Migration lacks %q", want)
		}
	}
}

func TestDefaultHistoryKeepIsTheMigrationsDefault(t *testing.T) {
	m := regexp.MustCompile(`history_keep bigint NOT NULL DEFAULT (\d+)`).FindStringSubmatch(Migration)
	if m == nil || m[1] != strconv.Itoa(DefaultHistoryKeep) {
		t.Fatalf("the migration's history_keep default is %q, DefaultHistoryKeep %d", m, DefaultHistoryKeep)
	}
	if !strings.Contains(Migration, "keep := "+strconv.Itoa(DefaultHistoryKeep)+";") {
		t.Fatalf("elector_fence()'s fallback without a settings row is not DefaultHistoryKeep (%d)", DefaultHistoryKeep)
	}
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// CheckSQL is the statement Check runs: elector_fence($1 resource, $2
// token, $3 lease UID, $4 holder).
const CheckSQL = "SELECT elector_fence($1, $2, $3, $4)"

// Validate is the Go-side check of a fence call before any SQL: a non-empty
// resource name of valid UTF-8 without NUL bytes, a non-negative token, and a
// Lease UID and holder that PostgreSQL can store as text.
func Validate(resource string, tok fencing.Token, holder string) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalid)
	}
	if tok.Value < 0 {
		return fmt.Errorf("%w: fencing token %d for resource %q is negative", ErrInvalid, tok.Value, resource)
	}
	for name, s := range map[string]string{"resource name": resource, "lease UID": tok.LeaseUID, "holder": holder} {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return fmt.Errorf("%w: %s %q is not text PostgreSQL can store (invalid UTF-8 or a NUL byte)", ErrInvalid, name, s)
		}
	}
	return nil
}

// Check runs elector_fence() in tx, a transaction of yours, in a round trip
// of its own: nil if tok is accepted (the resource's lock is then held until
// tx ends), a *fencing.StaleTokenError if it is stale, an error matching
// ErrInvalid for bad input. After an error, tx is aborted: roll it back.
func Check(ctx context.Context, tx pgx.Tx, resource string, tok fencing.Token, holder string) error {
	if err := Validate(resource, tok, holder); err != nil {
		return err
	}
	var accepted int64
	err := tx.QueryRow(ctx, CheckSQL, resource, tok.Value, tok.LeaseUID, holder).Scan(&accepted)
	if err != nil {
		return ParseError(err, tok)
	}
	return nil
}

// ParseError maps an error of elector_fence() to Go: EF001 to a
// *fencing.StaleTokenError for tok (Highest and HighestLeaseUID from the
// error's DETAIL), 22023 to an error matching ErrInvalid. Other errors are
// returned as they are. Use it on errors of your own SELECT elector_fence(...).
func ParseError(err error, tok fencing.Token) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case CodeStaleToken:
		stored, uid, ok := parseStaleDetail(pgErr.Detail)
		if !ok {
			return fmt.Errorf("postgres fence: malformed stale-token detail %q: %w", pgErr.Detail, err)
		}
		return &fencing.StaleTokenError{Token: tok.Value, Highest: stored, LeaseUID: tok.LeaseUID, HighestLeaseUID: uid}
	case CodeInvalidInput:
		return fmt.Errorf("%w: %s", ErrInvalid, pgErr.Message)
	}
	return err
}

// parseStaleDetail parses "token=<t> stored=<s> stored_lease_uid=<uid to the end>".
func parseStaleDetail(detail string) (stored int64, uid string, ok bool) {
	fields := strings.SplitN(detail, " ", 3)
	if len(fields) != 3 || !strings.HasPrefix(fields[0], "token=") || !strings.HasPrefix(fields[1], "stored=") ||
		!strings.HasPrefix(fields[2], "stored_lease_uid=") {
		return 0, "", false
	}
	stored, err := strconv.ParseInt(strings.TrimPrefix(fields[1], "stored="), 10, 64)
	if err != nil || stored < 0 {
		return 0, "", false
	}
	return stored, strings.TrimPrefix(fields[2], "stored_lease_uid="), true
}

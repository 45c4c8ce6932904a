package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// runFenced runs fn on tx wrapped so that the token check goes with fn's
// first statement (see Do). The check's error wins over fn's: a stale
// token is reported as such whatever fn did with its statement's error.
func runFenced(ctx context.Context, tx pgx.Tx, resource string, tok fencing.Token, holder string, fn func(pgx.Tx) error) error {
	ft := &fencedTx{Tx: tx, ctx: ctx, resource: resource, tok: tok, holder: holder}
	err := fn(ft)
	if !ft.sent && err != nil {
		return err
	}
	if cerr := ft.ensure(ctx); cerr != nil {
		return cerr
	}
	return err
}

// fencedTx is a pgx.Tx whose first statement is preceded by the fence's
// check, in the same batch when the statement allows it.
type fencedTx struct {
	pgx.Tx
	ctx      context.Context // Do's, for the methods without one
	resource string
	tok      fencing.Token
	holder   string
	sent     bool  // the check was sent
	err      error // its outcome, once sent
}

var _ pgx.Tx = (*fencedTx)(nil)

// ensure runs the check in a round trip of its own unless it was sent.
func (t *fencedTx) ensure(ctx context.Context) error {
	if !t.sent {
		t.sent = true
		t.err = Check(ctx, t.Tx, t.resource, t.tok, t.holder)
	}
	return t.err
}

// batchable reports whether a statement with these arguments can be queued
// in a pgx batch (which has no per-statement QueryExecMode or result
// formats).
func batchable(args []any) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// batch sends the check and the statement in one batch and reads the
// check's result. br is nil when the check was already sent or the
// statement cannot be batched (the check has then run alone, err is its
// outcome); the caller runs the statement itself.
func (t *fencedTx) batch(ctx context.Context, sql string, args []any) (br pgx.BatchResults, err error) {
	if t.sent || !batchable(args) {
		return nil, t.ensure(ctx)
	}
	t.sent = true
	b := &pgx.Batch{}
	b.Queue(CheckSQL, t.resource, t.tok.Value, t.tok.LeaseUID, t.holder)
	b.Queue(sql, args...)
	br = t.Tx.SendBatch(ctx, b)
	var accepted int64
	if err := br.QueryRow().Scan(&accepted); err != nil {
		t.err = ParseError(err, t.tok)
		_ = br.Close()
		return nil, t.err
	}
	return br, nil
}

func (t *fencedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := t.batch(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if br == nil {
		return t.Tx.Exec(ctx, sql, args...)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *fencedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := t.batch(ctx, sql, args)
	if err != nil {
		return errRows{err: err}, err
	}
	if br == nil {
		return t.Tx.Query(ctx, sql, args...)
	}
	rows, err := br.Query()
	if err != nil {
		rows.Close()
		_ = br.Close()
		return errRows{err: err}, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *fencedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &oneRow{rows: rows, err: err}
}

func (t *fencedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	_ = t.ensure(ctx) // a failed check aborts tx: the batch then fails too
	return t.Tx.SendBatch(ctx, b)
}

func (t *fencedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensure(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

func (t *fencedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

func (t *fencedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Begin(ctx)
}

func (t *fencedTx) LargeObjects() pgx.LargeObjects {
	_ = t.ensure(t.ctx)
	return t.Tx.LargeObjects()
}

func (t *fencedTx) Conn() *pgx.Conn {
	_ = t.ensure(t.ctx)
	return t.Tx.Conn()
}

// batchRows are the statement's rows; closing them (or reading past the
// last) closes the batch, so tx can run its next statement.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closed   bool
	closeErr error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.closeErr = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// oneRow is QueryRow's answer, as pgx's: the first row, pgx.ErrNoRows if
// none.
type oneRow struct {
	rows pgx.Rows
	err  error
}

func (r *oneRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRows are the rows of a statement that did not run.
type errRows struct{ err error }

func (errRows) Close()                                       {}
func (r errRows) Err() error                                 { return r.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                          { return r.err }
func (r errRows) Values() ([]any, error)                     { return nil, r.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }

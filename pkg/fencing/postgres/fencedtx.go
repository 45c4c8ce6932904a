package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// runFenced runs fn in a transaction on db whose token check goes with fn's
// first statement (see Do), and commits it unless fn, the check or the
// statement failed. The check's error wins over fn's: a stale token is
// reported as such whatever fn did with its statement's error.
func runFenced(ctx context.Context, db DB, opts pgx.TxOptions, resource string, tok fencing.Token, holder string, fn func(pgx.Tx) error) error {
	ft := &fencedTx{db: db, opts: opts, ctx: ctx, resource: resource, tok: tok, holder: holder}
	if _, ok := batchBegins(db); !ok {
		// A database that cannot begin a transaction in a batch: BEGIN in a
		// round trip of its own, as pgx.BeginTxFunc.
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return err
		}
		ft.tx = tx
	}
	defer ft.rollback(ctx)
	err := fn(ft)
	if !ft.sent && err != nil {
		return err
	}
	if cerr := ft.ensure(ctx); cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}
	return ft.tx.Commit(ctx)
}

// batchSender sends a batch that may begin a transaction (pgx.Batch.BeginTx).
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// batchBegins returns db as a batchSender if it is one of pgx's, which
// honour pgx.Batch.BeginTx (the transaction is BatchResults.Tx); any other DB
// begins with BeginTx.
func batchBegins(db DB) (batchSender, bool) {
	switch d := db.(type) {
	case *pgx.Conn:
		return d, true
	case *pgxpool.Pool:
		return d, true
	}
	return nil, false
}

// fencedTx is a pgx.Tx whose first statement is preceded by the fence's
// check, in the same batch when the statement allows it. On a *pgx.Conn or a
// *pgxpool.Pool the transaction's BEGIN rides in that batch too (tx is nil
// until then), so a fenced transaction of one statement takes two round
// trips: BEGIN, the check and the statement; COMMIT.
type fencedTx struct {
	db       DB
	opts     pgx.TxOptions
	tx       pgx.Tx          // the transaction, once begun
	ctx      context.Context // Do's, for the methods without one
	resource string
	tok      fencing.Token
	holder   string
	sent     bool  // the check was sent
	err      error // its outcome, once sent
}

var _ pgx.Tx = (*fencedTx)(nil)

// ensure runs the check unless it was sent: with the BEGIN in one batch if
// the transaction is not begun yet, else in a round trip of its own.
func (t *fencedTx) ensure(ctx context.Context) error {
	if t.sent {
		return t.err
	}
	if t.tx != nil {
		t.sent = true
		t.err = Check(ctx, t.tx, t.resource, t.tok, t.holder)
		return t.err
	}
	_, err := t.batch(ctx, "", nil)
	return err
}

// rollback ends a transaction that was begun and not committed (a no-op
// after Commit or Rollback).
func (t *fencedTx) rollback(ctx context.Context) {
	if t.tx != nil {
		_ = t.tx.Rollback(ctx)
	}
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

// batch sends, in one batch, the BEGIN (if the transaction is not begun),
// the check and the statement sql (unless it is ""), and reads the results
// up to the check's. br is nil when there is no statement, when the check
// was already sent or when the statement cannot be batched (the check has
// then run, err is its outcome); the caller runs the statement itself.
func (t *fencedTx) batch(ctx context.Context, sql string, args []any) (br pgx.BatchResults, err error) {
	if t.sent {
		return nil, t.err
	}
	if sql != "" && !batchable(args) {
		sql = ""
	}
	t.sent = true
	b := &pgx.Batch{}
	begin := t.tx == nil
	if begin {
		b.BeginTx(t.opts)
	}
	b.Queue(CheckSQL, t.resource, t.tok.Value, t.tok.LeaseUID, t.holder)
	if sql != "" {
		b.Queue(sql, args...)
	}
	if begin {
		sender, _ := batchBegins(t.db)
		br = sender.SendBatch(ctx, b)
		t.tx = br.Tx()
		if _, err := br.Exec(); err != nil { // the BEGIN
			t.err = err
			_ = br.Close()
			return nil, t.err
		}
	} else {
		br = t.tx.SendBatch(ctx, b)
	}
	var accepted int64
	if err := br.QueryRow().Scan(&accepted); err != nil {
		t.err = ParseError(err, t.tok)
		_ = br.Close()
		return nil, t.err
	}
	if sql == "" {
		t.err = br.Close()
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
		return t.tx.Exec(ctx, sql, args...)
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
		return t.tx.Query(ctx, sql, args...)
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
	if err := t.ensure(ctx); err != nil && t.tx == nil {
		return pgx.FailedBatchResults(b, err)
	}
	// A failed check aborted tx: the batch then fails too.
	return t.tx.SendBatch(ctx, b)
}

func (t *fencedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensure(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

func (t *fencedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

func (t *fencedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// Commit checks the token first if nothing was sent yet.
func (t *fencedTx) Commit(ctx context.Context) error {
	if err := t.ensure(ctx); err != nil {
		return err
	}
	return t.tx.Commit(ctx)
}

// Rollback before anything was sent ends a transaction never begun: Do then
// returns pgx.ErrTxClosed, as pgx.BeginTxFunc does after fn rolled back.
func (t *fencedTx) Rollback(ctx context.Context) error {
	if t.tx == nil {
		t.sent, t.err = true, pgx.ErrTxClosed
		return nil
	}
	return t.tx.Rollback(ctx)
}

// LargeObjects and Conn begin the transaction (with the check) if it is not
// begun: they have no error to report; a failed check shows in the next
// statement.
func (t *fencedTx) LargeObjects() pgx.LargeObjects {
	_ = t.ensure(t.ctx)
	return t.tx.LargeObjects()
}

func (t *fencedTx) Conn() *pgx.Conn {
	_ = t.ensure(t.ctx)
	return t.tx.Conn()
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

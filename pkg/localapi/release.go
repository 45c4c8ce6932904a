package localapi

import (
	"context"
	"errors"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"io"
	"net/http"
	"time"
)

// POST /release: the app gives its token back, optionally staying out of
// the election for a while (?for=).

func (h *Handler) release(w http.ResponseWriter, r *http.Request) {
	q, ok := queryParams(w, r, "for")
	if !ok {
		return
	}
	var out time.Duration
	if v, set := q["for"]; set {
		d, err := parseDuration(v, time.Nanosecond, MaxReleaseFor)
		if err != nil {
			writeError(w, http.StatusBadRequest, "query parameter for: "+err.Error())
			return
		}
		out = d
	}
	if !discardBody(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReleaseTimeout)
	defer cancel()
	// Counted before the loop publishes the new time out, so that a reader
	// that sees the new state also sees the new count (view reads it after
	// Status): its ETag changes even when only the time out's end moved.
	h.releases.Add(1)
	var err error
	if out > 0 {
		err = h.el.ReleaseFor(ctx, out)
	} else {
		err = h.el.Release(ctx)
	}
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, election.ErrNotRunning):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, election.ErrReleaseNotProcessed):
		// The loop never took the request: nothing changed; a leader still
		// leads with the same token.
		writeError(w, http.StatusServiceUnavailable, err.Error()+": the election loop did not take the request in time; nothing changed, the token is unchanged")
	case errors.Is(err, election.ErrReleaseUnconfirmed):
		// The loop took it (a leader's token has stopped) but the Lease write
		// did not finish in time; it may still succeed or fail.
		writeError(w, http.StatusGatewayTimeout, err.Error()+": the election loop took the request (a leader's token has stopped), but writing the lease free did not finish in time; followers take over at the latest when the lease expires")
	default:
		// The token stopped before the write; the Lease expires by itself.
		writeError(w, http.StatusBadGateway, "stepped down, but writing the lease free failed: "+err.Error())
	}
}

// discardBody reads a body of unknown length (chunked) up to the cap before
// a release, so that a too-large one changes nothing; false (and a 413 or
// 400 written) when it is too large or cannot be read.
func discardBody(w http.ResponseWriter, r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes)); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
		} else {
			writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return false
	}
	return true
}

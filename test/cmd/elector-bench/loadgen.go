package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// A minimal keep-alive HTTP/1.1 client: one request at a time per
// connection, Content-Length bodies only. It costs far less CPU than
// net/http's client, which matters when the load generator and the server
// share two cores: more of the machine goes to the server under test.
type rawConn struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func dialRaw(addr, path string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: elector-bench\r\nAccept: application/json\r\n\r\n")
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4096), req: req}, nil
}

var (
	hdrContentLength = []byte("content-length:")
	hdrChunked       = []byte("transfer-encoding:")
)

// do sends the request and reads the whole response; it returns the status.
func (r *rawConn) do() (int, error) {
	if _, err := r.c.Write(r.req); err != nil {
		return 0, err
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	cl := 0
	for {
		h, err := r.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(h) <= 2 {
			break
		}
		if len(h) > len(hdrContentLength) && bytes.EqualFold(h[:len(hdrContentLength)], hdrContentLength) {
			cl, err = strconv.Atoi(string(bytes.TrimSpace(h[len(hdrContentLength):])))
			if err != nil {
				return 0, fmt.Errorf("bad content-length %q", h)
			}
		} else if len(h) > len(hdrChunked) && bytes.EqualFold(h[:len(hdrChunked)], hdrChunked) {
			return 0, errors.New("chunked responses are not supported by the load generator")
		}
	}
	if _, err := r.br.Discard(cl); err != nil {
		return 0, err
	}
	return status, nil
}

func (r *rawConn) close() { _ = r.c.Close() }

// LoadResult is one load run against one URL path.
type LoadResult struct {
	Target   string  `json:"target"`
	Mode     string  `json:"mode"` // "max" or "fixed"
	Conns    int     `json:"conns"`
	RateGoal float64 `json:"targetRps,omitempty"`
	Seconds  float64 `json:"seconds"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"rps"`
	// Latency: from writing the request to reading the whole response.
	Latency Dist `json:"latency"`
	// FromSchedule (fixed rate only): from the instant the request was
	// scheduled, so a stalled server cannot hide its queue (no coordinated
	// omission); it also includes the load generator's own timer lateness
	// (Go timers sleep in whole milliseconds when a CPU is idle).
	FromSchedule *Dist `json:"latencyFromSchedule,omitempty"`
}

// runLoad drives addr+path with conns keep-alive connections for d. rate 0:
// as fast as possible (closed loop); rate > 0: open loop at rate requests/s
// in total, spread evenly over the connections.
func runLoad(ctx context.Context, target, addr, path string, conns int, rate float64, d time.Duration) (LoadResult, error) {
	cs := make([]*rawConn, conns)
	for i := range cs {
		c, err := dialRaw(addr, path)
		if err != nil {
			for _, c := range cs[:i] {
				c.close()
			}
			return LoadResult{}, fmt.Errorf("dial %s: %w", addr, err)
		}
		cs[i] = c
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	// Warm every connection up (first request, buffers, server goroutine).
	for _, c := range cs {
		if _, err := c.do(); err != nil {
			return LoadResult{}, fmt.Errorf("%s%s: %w", addr, path, err)
		}
	}
	lats := make([][]time.Duration, conns)
	sched := make([][]time.Duration, conns)
	errs := make([]int, conns)
	var firstErr error
	var errMu sync.Mutex
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l, ls []time.Duration
			if rate > 0 {
				l = make([]time.Duration, 0, int(rate*d.Seconds())/conns+16)
				ls = make([]time.Duration, 0, int(rate*d.Seconds())/conns+16)
			} else {
				l = make([]time.Duration, 0, 1<<15)
			}
			interval := time.Duration(0)
			if rate > 0 {
				interval = time.Duration(float64(time.Second) * float64(conns) / rate)
			}
			next := start.Add(time.Duration(i) * interval / time.Duration(conns))
			for ctx.Err() == nil {
				var at time.Time
				if rate > 0 {
					if !next.Before(deadline) {
						break
					}
					if w := time.Until(next); w > 0 {
						time.Sleep(w)
					}
					at = next
					next = next.Add(interval)
				} else if !time.Now().Before(deadline) {
					break
				}
				sent := time.Now()
				status, err := c.do()
				done := time.Now()
				if err != nil || status != http.StatusOK {
					errs[i]++
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s%s: status %d, %v", addr, path, status, err)
					}
					errMu.Unlock()
					if err != nil {
						break // the connection is unusable
					}
					continue
				}
				l = append(l, done.Sub(sent))
				if rate > 0 {
					ls = append(ls, done.Sub(at))
				}
			}
			lats[i], sched[i] = l, ls
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all, allSched []time.Duration
	nerr := 0
	for i := range lats {
		all = append(all, lats[i]...)
		allSched = append(allSched, sched[i]...)
		nerr += errs[i]
	}
	mode := "max"
	if rate > 0 {
		mode = "fixed"
	}
	res := LoadResult{Target: target, Mode: mode, Conns: conns, RateGoal: rate, Seconds: elapsed.Seconds(),
		Requests: len(all), Errors: nerr, RPS: float64(len(all)) / elapsed.Seconds(), Latency: NewDist(all, false)}
	if rate > 0 {
		d := NewDist(allSched, false)
		res.FromSchedule = &d
	}
	if nerr > len(all)/100 {
		return res, fmt.Errorf("%d of %d requests failed, first: %v", nerr, nerr+len(all), firstErr)
	}
	return res, nil
}

// bareBody is the size and shape of a /token answer.
var bareBody = func() []byte {
	b, err := json.Marshal(localapi.TokenResponse{Token: 42, Lease: "bench/bench-localapi", LeaseUID: "0f8fad5b-d9cb-469f-a165-70867728950e", ExpiresInMs: 14321})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}()

// serveBare is the baseline: a bare net/http handler returning a constant,
// in its own process, behind the same http.Server settings as the sidecar.
func serveBare(addr string) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Type", "application/json")
		hdr.Set("Content-Length", strconv.Itoa(len(bareBody)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(bareBody)
	})
	return localapi.NewServer(addr, h).ListenAndServe()
}

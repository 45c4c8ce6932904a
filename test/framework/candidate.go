package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Timings are the election timings passed to a candidate.
type Timings struct {
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration
	ClockSkewMargin time.Duration
}

// TestTimings are short timings for tests (see the contract).
var TestTimings = Timings{
	LeaseDuration:   3 * time.Second,
	RenewDeadline:   2 * time.Second,
	RetryPeriod:     500 * time.Millisecond,
	ClockSkewMargin: 200 * time.Millisecond,
}

// Args returns the timing flags (zero fields are left to the binary's defaults).
func (t Timings) Args(kind CandidateKind) []string {
	var a []string
	add := func(flag string, d time.Duration) {
		if d > 0 {
			a = append(a, fmt.Sprintf("--%s=%s", flag, d))
		}
	}
	add("lease-duration", t.LeaseDuration)
	add("renew-deadline", t.RenewDeadline)
	add("retry-period", t.RetryPeriod)
	if kind == KindSidecar {
		add("clock-skew-margin", t.ClockSkewMargin)
	}
	return a
}

// CandidateKind says which binary a candidate runs.
type CandidateKind string

const (
	// KindSidecar is elector-sidecar.
	KindSidecar CandidateKind = "elector-sidecar"
	// KindClientGo is the client-go leaderelection baseline (test/cmd/clientgo-candidate).
	KindClientGo CandidateKind = "clientgo-candidate"
)

// CandidateSpec describes one candidate process. elector-sidecar and the
// client-go candidate take the same flags for what they share.
type CandidateSpec struct {
	Kind CandidateKind // default KindSidecar
	// Binary is the executable (from BuildBinaries).
	Binary     string
	Identity   string
	LeaseName  string
	Namespace  string
	Kubeconfig string
	Timings    Timings
	// HTTPAddress for the local API; empty: a free 127.0.0.1 port.
	HTTPAddress string
	// ExtraArgs are appended after the generated flags (a later flag wins).
	ExtraArgs []string
	Env       []string
	LogDir    string
	Output    io.Writer
	// NewProcessGroup: see ProcessSpec.
	NewProcessGroup bool
	// ReadyTimeout bounds waiting for /healthz (default 30s).
	ReadyTimeout time.Duration
}

// Args returns the command line for spec.
func (s CandidateSpec) Args() []string {
	a := []string{
		"--lease-name=" + s.LeaseName,
		"--lease-namespace=" + s.Namespace,
		"--identity=" + s.Identity,
		"--http-address=" + s.HTTPAddress,
	}
	if s.Kubeconfig != "" {
		a = append(a, "--kubeconfig="+s.Kubeconfig)
	}
	if s.Kind == KindSidecar || s.Kind == "" {
		a = append(a, "--log-level=debug")
	}
	a = append(a, s.Timings.Args(s.kind())...)
	return append(a, s.ExtraArgs...)
}

func (s CandidateSpec) kind() CandidateKind {
	if s.Kind == "" {
		return KindSidecar
	}
	return s.Kind
}

var (
	instanceMu  sync.Mutex
	instanceSeq = map[string]int{}
)

func nextInstance(identity string) string {
	instanceMu.Lock()
	defer instanceMu.Unlock()
	instanceSeq[identity]++
	return fmt.Sprintf("%s#%d", identity, instanceSeq[identity])
}

// Candidate is one running candidate process and a client for its local API.
type Candidate struct {
	*Process
	Spec CandidateSpec
	// Instance names this process uniquely (identity#n): a restarted identity
	// is a new instance.
	Instance string
	URL      string
	API      *APIClient
}

// StartCandidate starts spec and waits until its local API answers /healthz.
// If the chosen port was taken in the meantime it retries on another one.
func StartCandidate(ctx context.Context, spec CandidateSpec) (*Candidate, error) {
	if spec.Binary == "" {
		return nil, fmt.Errorf("start candidate %s: no binary", spec.Identity)
	}
	spec.Kind = spec.kind()
	pickPort := spec.HTTPAddress == ""
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if pickPort {
			addr, err := FreeAddress()
			if err != nil {
				return nil, err
			}
			spec.HTTPAddress = addr
		}
		c, err := startCandidateOnce(ctx, spec)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if !pickPort || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func startCandidateOnce(ctx context.Context, spec CandidateSpec) (*Candidate, error) {
	instance := nextInstance(spec.Identity)
	p, err := StartProcess(ProcessSpec{
		Name:            instance,
		Path:            spec.Binary,
		Args:            spec.Args(),
		Env:             spec.Env,
		LogDir:          spec.LogDir,
		Output:          spec.Output,
		NewProcessGroup: spec.NewProcessGroup,
	})
	if err != nil {
		return nil, err
	}
	url := "http://" + spec.HTTPAddress
	c := &Candidate{Process: p, Spec: spec, Instance: instance, URL: url, API: NewAPIClient(url)}
	timeout := spec.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if err := c.waitHealthy(ctx, timeout); err != nil {
		p.Stop(2 * time.Second)
		return nil, err
	}
	return c, nil
}

func (c *Candidate) waitHealthy(ctx context.Context, timeout time.Duration) error {
	var code int
	var err error
	perr := Poll(ctx, PollInterval, timeout, func(ctx context.Context) (bool, error) {
		if c.Exited() {
			code, _ := c.ExitCode()
			return false, fmt.Errorf("%s exited with code %d before serving /healthz; log:\n%s", c.Instance, code, c.LogTail(20))
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		code, err = c.API.Status(rctx, "/healthz")
		cancel()
		return err == nil && code == http.StatusOK, nil
	})
	if perr != nil && wait.Interrupted(perr) {
		return fmt.Errorf("%s: /healthz not OK: %w (last: %d %v); log:\n%s", c.Instance, perr, code, err, c.LogTail(20))
	}
	return perr
}

// Identity returns the candidate's --identity.
func (c *Candidate) Identity() string { return c.Spec.Identity }

// Token calls GET /token.
func (c *Candidate) Token(ctx context.Context) TokenResult { return c.API.Token(ctx) }

// Leader calls GET /leader.
func (c *Candidate) Leader(ctx context.Context) (LeaderStatus, error) { return c.API.Leader(ctx) }

// Stop stops the process (SIGCONT, SIGTERM, SIGKILL after grace) and returns its exit code.
func (c *Candidate) Stop(grace time.Duration) int {
	code := c.Process.Stop(grace)
	c.API.Close()
	return code
}

func (c *Candidate) String() string { return c.Instance }

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// tokenReply is the body of GET /token, whatever the status: the
// TokenResponse fields on 200, Error and Holder on 409 (Error on 503).
type tokenReply struct {
	localapi.TokenResponse
	localapi.NotLeaderResponse
}

// answer is one read of a pod's local API.
type answer struct {
	pod        string
	path       string
	sent, recv time.Time // the answer was produced somewhere in [sent, recv]
	status     int       // HTTP status; 0 if the request did not get an answer
	body       string
	err        error
	leader     localapi.LeaderResponse // parsed for /leader
	token      tokenReply              // parsed for /token
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("%s %s: error %v", a.pod, a.path, a.err)
	}
	return fmt.Sprintf("%s %s: %d %s", a.pod, a.path, a.status, strings.TrimSpace(a.body))
}

var answeredRE = regexp.MustCompile(`answered (\d{3})`)

// api GETs path from a pod's local API (127.0.0.1 inside the pod) with
// `kubectl exec POD -c elector -- /elector-sidecar probe PATH`, which prints
// the body and exits 0 on 2xx, 1 otherwise ("... answered 409 Conflict" on stderr).
func (r *release) api(ctx context.Context, pod, path string) answer {
	a := answer{pod: pod, path: path, sent: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, errOut, err := kubectl(cctx, "--namespace", r.ns, "exec", pod, "-c", sidecarName, "--", "/elector-sidecar", "probe", path)
	a.recv = time.Now()
	a.body = out
	switch {
	case err == nil:
		a.status = 200
	case answeredRE.MatchString(errOut):
		a.status, _ = strconv.Atoi(answeredRE.FindStringSubmatch(errOut)[1])
	default:
		a.err = fmt.Errorf("kubectl exec: %v: %s", err, strings.TrimSpace(errOut))
		return a
	}
	switch path {
	case "/leader":
		if jerr := json.Unmarshal([]byte(out), &a.leader); jerr != nil {
			a.err = fmt.Errorf("decoding /leader %q: %v", out, jerr)
		}
	case "/token":
		if jerr := json.Unmarshal([]byte(out), &a.token); jerr != nil {
			a.err = fmt.Errorf("decoding /token %q: %v", out, jerr)
		}
	}
	return a
}

// sample reads path from every pod at once.
func (r *release) sample(ctx context.Context, pods []string, path string) []answer {
	out := make([]answer, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.api(ctx, p, path)
		}()
	}
	wg.Wait()
	return out
}

// runningPods: names of the release's pods whose sidecar runs and that are not terminating.
func (r *release) runningPods(ctx context.Context) ([]string, error) {
	return r.podNames(ctx, sidecarRunning)
}

// sidecarPods: names of the release's pods whose sidecar runs, terminating or not (a terminating
// leader still leads until its sidecar gets SIGTERM, after the app stopped).
func (r *release) sidecarPods(ctx context.Context) ([]string, error) {
	return r.podNames(ctx, func(p *corev1.Pod) bool {
		cs := containerStatus(p, sidecarName)
		return p.Status.Phase == corev1.PodRunning && cs != nil && cs.State.Running != nil
	})
}

func (r *release) podNames(ctx context.Context, keep func(*corev1.Pod) bool) ([]string, error) {
	pods, err := r.pods(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range pods {
		if keep(&pods[i]) {
			names = append(names, pods[i].Name)
		}
	}
	return names, nil
}

// stableLeader waits until the pods agree: exactly one of the n running pods
// says isLeader, and every other one names it as holder. Returns the leader
// and its token.
func (r *release) stableLeader(n int, timeout time.Duration) (string, int64) {
	r.t.Helper()
	var last []answer
	var leader string
	var token int64
	err := poll(500*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		pods, err := r.runningPods(ctx)
		if err != nil || len(pods) != n {
			last = nil
			return false, nil
		}
		last = r.sample(ctx, pods, "/leader")
		var leaders []answer
		for _, a := range last {
			if a.err != nil || a.status != 200 {
				return false, nil
			}
			if a.leader.IsLeader {
				leaders = append(leaders, a)
			}
		}
		if len(leaders) != 1 {
			return false, nil
		}
		l := leaders[0]
		if l.leader.Identity != l.pod || l.leader.Holder != l.pod || l.leader.Token <= 0 {
			return false, fmt.Errorf("leader %s answers identity %q holder %q token %d", l.pod, l.leader.Identity, l.leader.Holder, l.leader.Token)
		}
		for _, a := range last {
			if a.pod != l.pod && a.leader.Holder != l.pod {
				return false, nil
			}
		}
		leader, token = l.pod, l.leader.Token
		return true, nil
	})
	if err != nil {
		r.t.Fatalf("no stable single leader among %d pods: %v; last answers:\n%s", n, err, answersString(last))
	}
	return leader, token
}

func answersString(as []answer) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	return b.String()
}

// leaderViolations checks leadership claims (200 answers of /leader with
// isLeader) sampled from outside the pods. The samples are not atomic: each
// answer was produced at an unknown instant in [sent, recv]. A claim with a
// lower token (an older term) that was certainly made after a claim with a
// higher token (a newer term) had been made (sent > recv of the newer one)
// means two leaders at once, or a token going backwards; two pods with the
// same token is two leaders in one term. Claims whose windows overlap are
// consistent with a handoff during the sample and are not violations.
func leaderViolations(as []answer) []string {
	var claims []answer
	for _, a := range as {
		if a.err == nil && a.status == 200 && a.leader.IsLeader {
			claims = append(claims, a)
		}
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].sent.Before(claims[j].sent) })
	var v []string
	for i := range claims {
		for j := range claims {
			a, b := claims[i], claims[j]
			switch {
			case a.leader.Token == b.leader.Token && a.pod != b.pod && i < j:
				v = append(v, fmt.Sprintf("token %d claimed by two pods: %s and %s", a.leader.Token, a, b))
			case a.leader.Token < b.leader.Token && a.sent.After(b.recv):
				v = append(v, fmt.Sprintf("%s (token %d) claimed leadership at %s, after %s (token %d) had claimed it by %s",
					a.pod, a.leader.Token, a.sent.Format("15:04:05.000"), b.pod, b.leader.Token, b.recv.Format("15:04:05.000")))
			}
		}
	}
	return v
}

// hostContainerID: the container runtime ID of a container ("" if not started).
func hostContainerID(p *corev1.Pod, container string) string {
	cs := containerStatus(p, container)
	if cs == nil || cs.ContainerID == "" {
		return ""
	}
	_, id, _ := strings.Cut(cs.ContainerID, "://")
	return id
}

// logLine is one line of a container log read with timestamps.
type logLine struct {
	ts   time.Time
	text string
}

func parseLogs(s string) []logLine {
	var out []logLine
	for _, l := range strings.Split(s, "\n") {
		if l == "" {
			continue
		}
		tsStr, text, _ := strings.Cut(l, " ")
		ts, err := time.Parse(time.RFC3339Nano, tsStr)
		if err != nil {
			out = append(out, logLine{text: l})
			continue
		}
		out = append(out, logLine{ts: ts, text: text})
	}
	return out
}

// stepDownLine finds the sidecar's step-down at shutdown: a release, or a
// direct handoff to another pod.
func stepDownLine(lines []logLine) (logLine, bool) {
	if l, ok := firstLine(lines, `"msg":"released leadership"`, `"reason":"shutting down"`); ok {
		return l, true
	}
	return firstLine(lines, `"msg":"handed leadership over"`, `"reason":"shutting down"`)
}

// firstLine: the first line containing every one of subs.
func firstLine(lines []logLine, subs ...string) (logLine, bool) {
next:
	for _, l := range lines {
		for _, s := range subs {
			if !strings.Contains(l.text, s) {
				continue next
			}
		}
		return l, true
	}
	return logLine{}, false
}

// mustLeader is stableLeader with a log line.
func (r *release) mustLeader(t *testing.T) (string, int64) {
	t.Helper()
	start := time.Now()
	leader, token := r.stableLeader(replicas, 90*time.Second)
	t.Logf("leader %s token %d (agreed after %.1fs)", leader, token, time.Since(start).Seconds())
	return leader, token
}

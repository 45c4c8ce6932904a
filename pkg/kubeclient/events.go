package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// EventInterface is the part of a typed Event client the Recorder uses;
// client-go's core/v1 EventInterface (real or fake) has it.
type EventInterface interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
}

// Events returns the Event client of namespace.
func (c *Client) Events(namespace string) EventInterface {
	return &events{client: c.core, ns: namespace}
}

type events struct {
	client rest.Interface
	ns     string
}

func (c *events) Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	result := &corev1.Event{}
	err := c.client.Post().Namespace(c.ns).Resource("events").
		VersionedParams(&opts, parameterCodec).Body(event).Do(ctx).Into(result)
	return result, err
}

// Limits of a Recorder, as client-go's record package has them.
const (
	// EventBurst events may be written at once, and then one every
	// EventRefill (client-go's spam filter for one object and source).
	EventBurst  = 25
	EventRefill = 5 * time.Minute
	// MaxQueuedEvents wait to be written; more are dropped.
	MaxQueuedEvents = 1000
	// EventTries is how often an event is sent when the API server cannot
	// be reached, EventRetryPeriod apart (the first retry after a random
	// part of it).
	EventTries       = 12
	EventRetryPeriod = 10 * time.Second
)

// Recorder writes core/v1 Events in the background, as client-go's
// record.EventBroadcaster does when it records to a sink, with the same
// event fields (name, involved object, source, reporting controller and
// instance, timestamps, count 1), retries and limits. It leaves out
// client-go's correlator, which links strategic merge patch and the
// OpenAPI models (0.9 MiB of binary, 2 MiB of a leader's RSS): an event is
// created once, never merged with similar events or counted up with a
// patch. Events beyond EventBurst, then beyond one per EventRefill, are
// dropped (the sidecar records a few per leadership change; a flapping app
// health check must not flood the API server).
//
// Its Eventf has the signature of record.EventRecorder's. Create it with
// NewRecorder; Shutdown stops it.
type Recorder struct {
	events  EventInterface
	source  corev1.EventSource
	log     *slog.Logger
	clock   clock.Clock
	limiter flowcontrol.RateLimiter
	queue   chan *corev1.Event

	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// NewRecorder starts a recorder that writes events through events (a
// client of the involved objects' namespace) with source as their source
// and reporting controller (Component) and instance (Host). A nil log
// means slog.Default(); a nil clock the real one.
func NewRecorder(events EventInterface, source corev1.EventSource, log *slog.Logger, clk clock.Clock) *Recorder {
	if log == nil {
		log = slog.Default()
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		events:  events,
		source:  source,
		log:     log,
		clock:   clk,
		limiter: flowcontrol.NewTokenBucketRateLimiterWithClock(float32(time.Second)/float32(EventRefill), EventBurst, clk),
		queue:   make(chan *corev1.Event, MaxQueuedEvents),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go r.run()
	return r
}

// Eventf queues an event about object (its kind must be in Scheme); it
// never blocks.
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	message := fmt.Sprintf(messageFmt, args...)
	ref, err := reference.GetReference(Scheme, object)
	if err != nil {
		r.log.Error("event not recorded: no reference to its object", "err", err, "reason", reason, "message", message)
		return
	}
	if !util.ValidateEventType(eventtype) {
		r.log.Error("event not recorded: unsupported event type", "eventType", eventtype, "reason", reason, "message", message)
		return
	}
	if !r.limiter.TryAccept() {
		r.log.Warn("event not recorded: too many events", "burst", EventBurst, "refill", EventRefill, "reason", reason, "message", message)
		return
	}
	t := metav1.Time{Time: r.clock.Now()}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, t.UnixNano()), Namespace: namespace},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                eventtype,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}
	select {
	case r.queue <- ev:
	default:
		r.log.Error("event not recorded: too many queued events", "max", MaxQueuedEvents, "reason", reason, "message", message)
	}
}

// Shutdown stops the recorder: a request in flight is cancelled, and
// queued events are dropped (as with client-go's broadcaster, events are
// best effort). It returns once the background goroutine has ended.
func (r *Recorder) Shutdown() {
	r.stopOnce.Do(r.cancel)
	<-r.done
}

func (r *Recorder) run() {
	defer close(r.done)
	for {
		select {
		case <-r.ctx.Done():
			return
		case ev := <-r.queue:
			r.write(ev)
		}
	}
}

// eventRequestTimeout bounds one Create.
const eventRequestTimeout = 10 * time.Second

// write creates ev, retrying while the API server cannot be reached; an
// event the server rejects is dropped (client-go's recordToSink).
func (r *Recorder) write(ev *corev1.Event) {
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(r.ctx, eventRequestTimeout)
		_, err := r.events.Create(ctx, ev, metav1.CreateOptions{})
		cancel()
		if err == nil || r.ctx.Err() != nil {
			return
		}
		var rce *rest.RequestConstructionError
		var status apierrors.APIStatus
		switch {
		case apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			r.log.Debug("event rejected by the server", "err", err, "event", ev.Name)
			return
		case errors.As(err, &rce) || errors.As(err, &status):
			r.log.Error("event rejected by the server (will not retry)", "err", err, "event", ev.Name, "message", ev.Message)
			return
		case try >= EventTries:
			r.log.Error("event not recorded: the API server did not answer", "tries", try, "err", err, "event", ev.Name, "message", ev.Message)
			return
		}
		wait := EventRetryPeriod
		if try == 1 {
			// Spread the first retries of many processes (client-go's).
			wait = time.Duration(rand.Float64() * float64(EventRetryPeriod))
		}
		r.log.Warn("event not written; will retry", "in", wait.Round(time.Millisecond), "err", err, "event", ev.Name)
		select {
		case <-r.ctx.Done():
			return
		case <-r.clock.After(wait):
		}
	}
}

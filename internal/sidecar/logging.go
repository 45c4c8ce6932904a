package sidecar

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// NewLogger returns the process logger and routes client-go's klog into it.
func NewLogger(c *Config, w io.Writer) *slog.Logger {
	h := newLogHandler(c, w)
	// client-go's lines carry one "logger" key: "client-go", or
	// "client-go/NAME" for a named logger. Contextual: client-go's named
	// loggers call ours directly and logr joins the names (through klog's
	// own klogr, or with an attr of ours, a line carried the key twice).
	klog.SetLoggerWithOptions(logr.FromSlogHandler(h).WithName("client-go"), klog.ContextualLogger(true))
	return slog.New(h)
}

// newLogHandler is the handler of --log-format and --log-level. Durations
// are written as Go duration strings ("15s"), in JSON too (slog's JSON
// handler would write integer nanoseconds); client-go's verbose lines
// (logr V(1) to V(4), slog levels -1 to -4) all say DEBUG.
func newLogHandler(c *Config, w io.Writer) slog.Handler {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}
	if c.LogFormat == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	switch {
	case a.Value.Kind() == slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
	case a.Key == slog.LevelKey && len(groups) == 0:
		if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelInfo {
			a.Value = slog.StringValue(slog.LevelDebug.String())
		}
	}
	return a
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil || !map[string]bool{"debug": true, "info": true, "warn": true, "error": true}[strings.ToLower(s)] {
		return 0, fmt.Errorf("--log-level %q: must be debug, info, warn or error", s)
	}
	return l, nil
}

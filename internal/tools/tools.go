//go:build tools

// Package tools pins dependencies used only by tests and tools.
package tools

import (
	_ "github.com/go-logr/logr"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.uber.org/goleak"
	_ "k8s.io/api/coordination/v1"
	_ "k8s.io/apimachinery/pkg/api/errors"
	_ "k8s.io/cli-runtime/pkg/genericclioptions"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/klog/v2"
	_ "k8s.io/utils/clock"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
)

package servekit

import (
	"context"
	"net/url"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Version is the release the binary was built from, set at link time
// (-ldflags "-X nodeconfig.io/services/servekit.Version=v0.1.0"); empty,
// the main module's version as Go recorded it.
var Version string

// version is what nodeconfig_build_info says.
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// newBuildInfo is 1, labelled with what was built: the series a dashboard
// joins to tell replicas and nodes of different releases apart.
func newBuildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nodeconfig_build_info",
		Help: "1, labelled with the version of the binary and the Go version it was built with."}, []string{"version", "go_version"})
	g.WithLabelValues(version(), runtime.Version()).Set(1)
	return g
}

// gRPC server series per method and code (grpc_server_handled_total and
// its kin); each series appears with its first call, so an agent's page
// holds only the methods it serves. The handling time has few buckets:
// every node exports them.
func newGRPCMetrics() *grpcprom.ServerMetrics {
	return grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{0.005, 0.025, 0.1, 0.5, 2.5, 10})))
}

// client-go reports its requests and work queues to one process-wide
// sink each (tools/metrics, workqueue.SetProvider): the collectors below
// are that sink, registered on every Server's registry.
var (
	kubeRequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
		Help: "Latency of the Kubernetes API requests, by verb and host.", Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}},
		[]string{"verb", "host"})
	kubeRateLimiterSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_rate_limiter_duration_seconds",
		Help: "Time the Kubernetes API requests waited on the client-side rate limiter, by verb and host.", Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}},
		[]string{"verb", "host"})
	kubeRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
		Help: "Kubernetes API requests, by status code, method and host."}, []string{"code", "method", "host"})
	kubeRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_request_retries_total",
		Help: "Kubernetes API requests retried, by status code, method and host."}, []string{"code", "method", "host"})

	queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth",
		Help: "Items waiting in the work queue."}, []string{"name"})
	queueAdds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total",
		Help: "Items added to the work queue."}, []string{"name"})
	queueWaitSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds",
		Help: "Time an item waits in the work queue before it is processed.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"name"})
	queueWorkSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds",
		Help: "Time processing one item of the work queue takes.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"name"})
	queueUnfinishedSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds",
		Help: "Seconds of work in progress not yet done: a large value that grows is a stuck worker."}, []string{"name"})
	queueLongestSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds",
		Help: "Seconds the longest running item of the work queue has been processed."}, []string{"name"})
	queueRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total",
		Help: "Items the work queue took back with a delay (retries)."}, []string{"name"})

	installKubeMetrics sync.Once
)

// kubeCollectors are client-go's series, routed to them once per process.
func kubeCollectors() []prometheus.Collector {
	installKubeMetrics.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:     latency{kubeRequestSeconds},
			RateLimiterLatency: latency{kubeRateLimiterSeconds},
			RequestResult:      result{kubeRequests},
			RequestRetry:       retry{kubeRetries},
		})
		workqueue.SetProvider(queueMetrics{})
	})
	return []prometheus.Collector{kubeRequestSeconds, kubeRateLimiterSeconds, kubeRequests, kubeRetries,
		queueDepth, queueAdds, queueWaitSeconds, queueWorkSeconds, queueUnfinishedSeconds, queueLongestSeconds, queueRetries}
}

// latency adapts a histogram to client-go's LatencyMetric: by host, not by
// URL, whose paths name every object.
type latency struct{ h *prometheus.HistogramVec }

func (l latency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type result struct{ c *prometheus.CounterVec }

func (r result) Increment(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

type retry struct{ c *prometheus.CounterVec }

func (r retry) IncrementRetry(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

// queueMetrics is client-go's workqueue.MetricsProvider: a named queue's
// series are labelled with its name.
type queueMetrics struct{}

func (queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return queueDepth.WithLabelValues(name)
}

func (queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return queueAdds.WithLabelValues(name)
}

func (queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return queueWaitSeconds.WithLabelValues(name)
}

func (queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return queueWorkSeconds.WithLabelValues(name)
}

func (queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueUnfinishedSeconds.WithLabelValues(name)
}

func (queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueLongestSeconds.WithLabelValues(name)
}

func (queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return queueRetries.WithLabelValues(name)
}

// ForgetWorkQueues drops the series of the named work queues once they
// are shut down: a process that made them (a reconciler that lost its
// Lease) shows no depth left over from them, and the queues it makes next
// under the same names start from zero.
func ForgetWorkQueues(names ...string) {
	for _, name := range names {
		for _, v := range []interface{ DeleteLabelValues(...string) bool }{
			queueDepth, queueAdds, queueWaitSeconds, queueWorkSeconds, queueUnfinishedSeconds, queueLongestSeconds, queueRetries,
		} {
			v.DeleteLabelValues(name)
		}
	}
}

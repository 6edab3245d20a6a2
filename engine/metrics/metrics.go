// Package metrics is the operator's Prometheus registry: reconcile counts and durations, children
// by outcome, caches by Ready status, client-go's request metrics and the workqueue's. No metric
// has a per-object label, so the cardinality stays the same with thousands of caches.
//
// It is not for serving them (package app serves /metrics) or for deciding anything.
package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Registry is the operator's Prometheus registry.
var Registry = prometheus.NewRegistry()

var (
	reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cache_operator_reconcile_duration_seconds",
		Help:    "Time one reconcile of a ManagedCache took, by result (success, error).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"result"})
	reconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_reconcile_total",
		Help: "Reconciles of ManagedCaches, by result (success, error).",
	}, []string{"result"})
	reconcileErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_reconcile_errors_total",
		Help: "Reconciles that failed and were retried with backoff.",
	})
	childrenApplied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_children_total",
		Help: "Children compared with their desired state, by kind and outcome (created, configured, unchanged, failed).",
	}, []string{"kind", "outcome"})
)

func init() {
	register(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		reconcileDuration, reconcileTotal, reconcileErrors, childrenApplied)
	workqueue.SetProvider(queueMetrics)
	clientmetrics.Register(clientmetrics.RegisterOpts{RequestLatency: requestLatency, RequestResult: requestResult})
	register(requestLatency.vec, requestResult.vec)
}

// ObserveReconcile records one reconcile that started at start and returned err.
func ObserveReconcile(start time.Time, err error) {
	result := "success"
	if err != nil {
		result = "error"
		reconcileErrors.Inc()
	}
	reconcileDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	reconcileTotal.WithLabelValues(result).Inc()
}

// ChildCompared records one child compared with its desired state, and what was done.
func ChildCompared(kind, outcome string) { childrenApplied.WithLabelValues(kind, outcome).Inc() }

// fleetCollector reports the caches by Ready status at scrape time.
type fleetCollector struct {
	count func() map[string]int
}

var fleetDesc = prometheus.NewDesc("cache_operator_managedcaches",
	"ManagedCaches by the status of their Ready condition (True, False, Unknown), hibernated ones apart (Hibernated).", []string{"ready"}, nil)

func (f fleetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- fleetDesc }

func (f fleetCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"True": 0, "False": 0, "Unknown": 0, "Hibernated": 0}
	for status, n := range f.count() {
		counts[status] += n
	}
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(fleetDesc, prometheus.GaugeValue, float64(n), status)
	}
}

var fleetOnce sync.Once

// RegisterFleet exports the caches by Ready status; count returns how many caches have each
// status (True, False, Unknown) and is called at scrape time. Only the first call of the process
// registers.
func RegisterFleet(count func() map[string]int) {
	fleetOnce.Do(func() { register(fleetCollector{count: count}) })
}

// client-go request metrics, by verb and by code and method (never by URL: it names objects).
type latencyAdapter struct{ vec *prometheus.HistogramVec }

func (l latencyAdapter) Observe(_ context.Context, verb string, _ url.URL, latency time.Duration) {
	l.vec.WithLabelValues(verb).Observe(latency.Seconds())
}

type resultAdapter struct{ vec *prometheus.CounterVec }

func (r resultAdapter) Increment(_ context.Context, code, method, _ string) {
	r.vec.WithLabelValues(code, method).Inc()
}

var (
	requestLatency = latencyAdapter{prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_request_duration_seconds", Help: "API request latency, by verb.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"verb"})}
	requestResult = resultAdapter{prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total", Help: "API requests, by HTTP status code and method.",
	}, []string{"code", "method"})}
)

// queueMetricsProvider exports client-go's workqueue metrics, labelled by queue name.
type queueMetricsProvider struct {
	adds, retries              *prometheus.CounterVec
	depthGauge                 *prometheus.GaugeVec
	latency, workDuration      *prometheus.HistogramVec
	unfinished, longestRunning *prometheus.GaugeVec
}

var queueMetrics = func() *queueMetricsProvider {
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10)
	p := &queueMetricsProvider{
		depthGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the workqueue."}, []string{"name"}),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the workqueue."}, []string{"name"}),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries handled by the workqueue."}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds",
			Help: "Seconds an item waits in the workqueue before being processed.", Buckets: buckets}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds",
			Help: "Seconds processing an item takes.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"}),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds",
			Help: "Seconds the longest running processor has been running."}, []string{"name"}),
	}
	register(p.depthGauge, p.adds, p.retries, p.latency, p.workDuration, p.unfinished, p.longestRunning)
	return p
}()

func (p *queueMetricsProvider) NewDepthMetric(n string) workqueue.GaugeMetric {
	return p.depthGauge.WithLabelValues(n)
}
func (p *queueMetricsProvider) NewAddsMetric(n string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(n)
}
func (p *queueMetricsProvider) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(n)
}
func (p *queueMetricsProvider) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(n)
}
func (p *queueMetricsProvider) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(n)
}
func (p *queueMetricsProvider) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(n)
}
func (p *queueMetricsProvider) NewRetriesMetric(n string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(n)
}

var (
	memberPolls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_member_polls_total",
		Help: "Reads of a member's replication state (INFO), by result (success, error).",
	}, []string{"result"})
	failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_failovers_total",
		Help: "Primaries replaced, by kind: failover (the primary was gone) or switchover (handed over by a live primary).",
	}, []string{"kind"})
	failoverDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cache_operator_failover_duration_seconds",
		Help:    "From the primary first seen gone (failover) or the handover's start (switchover) until the new primary serves, by kind.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60},
	}, []string{"kind"})
	liveSettings = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_live_settings_applied_total",
		Help: "Settings given to a member's running server with CONFIG SET (a change of the cache's live settings, or a setting found changed by hand).",
	})
)

var (
	writesDiscarded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_writes_discarded_bytes_total",
		Help: "Bytes of replication stream that deposed primaries acknowledged after another member took over, dropped when they rejoined as replicas (the Events WritesDiscarded name the cache).",
	})
	writesDiscardedUnmeasured = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_writes_discarded_unmeasured_total",
		Help: "Deposed primaries that rejoined as replicas from a replication history the primary does not continue: what they acknowledged apart could not be measured.",
	})
	dataResets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_data_resets_total",
		Help: "Version changes the data could not survive, let through by cache.example.com/allow-data-loss: every member restarted empty (the Events DataDiscarded name the cache).",
	})
	dataResetKeys = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_data_reset_keys_total",
		Help: "Keys the caches held (the most any member reported at the last poll) when a reset discarded their data.",
	})
	dataLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_data_lost_total",
		Help: "Caches whose every member came back empty on a new replication history after they held keys, with no reset asked for (the Events DataLost name the cache).",
	}, []string{"namespace", "cache"})
	dataLostKeys = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_data_lost_keys_total",
		Help: "Keys the caches held (the most any member reported at the last poll that saw keys) when every member came back empty.",
	}, []string{"namespace", "cache"})
)

var (
	slotsMoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_reshard_slots_moved_total",
		Help: "Hash slots sharded caches' reshards moved from one shard to another.",
	})
	keysMoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cache_operator_reshard_keys_moved_total",
		Help: "Keys sharded caches' reshards moved with their slots (MIGRATE).",
	})
)

// Moved records slots and keys a reshard moved.
func Moved(slots, keys int) {
	slotsMoved.Add(float64(slots))
	keysMoved.Add(float64(keys))
}

// DataLost records that every member of the cache ns/name came back empty, after it held keys.
func DataLost(ns, name string, keys int64) {
	dataLost.WithLabelValues(ns, name).Inc()
	dataLostKeys.WithLabelValues(ns, name).Add(float64(keys))
}

// DataReset records a reset that discarded a cache's data, which held keys keys.
func DataReset(keys int64) {
	dataResets.Inc()
	dataResetKeys.Add(float64(keys))
}

func init() {
	register(memberPolls, failovers, failoverDuration, liveSettings, writesDiscarded, writesDiscardedUnmeasured, dataResets, dataResetKeys,
		dataLost, dataLostKeys, slotsMoved, keysMoved)
}

// WritesDiscarded records bytes of writes a deposed primary took that the primary never had.
func WritesDiscarded(bytes int64) { writesDiscarded.Add(float64(bytes)) }

// WritesDiscardedUnmeasured records a deposed primary whose discarded writes could not be measured.
func WritesDiscardedUnmeasured() { writesDiscardedUnmeasured.Inc() }

// LiveSettingsApplied records n settings given to a member's server.
func LiveSettingsApplied(n int) { liveSettings.Add(float64(n)) }

// MemberObserved records one read of a member's replication state.
func MemberObserved(err error) {
	if err != nil {
		memberPolls.WithLabelValues("error").Inc()
		return
	}
	memberPolls.WithLabelValues("success").Inc()
}

// Failover records a primary replaced (kind failover or switchover) after d.
func Failover(kind string, d time.Duration) {
	failovers.WithLabelValues(kind).Inc()
	failoverDuration.WithLabelValues(kind).Observe(d.Seconds())
}

// certificateExpiry is each TLS cache's members' certificate expiry: one series per TLS cache
// (namespace, cache), dropped when the cache goes.
var certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cache_operator_certificate_expiry_timestamp_seconds",
	Help: "When the members' TLS certificate of each TLS cache expires (Unix seconds); renewed with a third of its lifetime left.",
}, []string{"namespace", "cache"})

func init() { register(certificateExpiry) }

// CertificateExpiry records when a TLS cache's members' certificate expires.
func CertificateExpiry(namespace, cache string, notAfter time.Time) {
	certificateExpiry.WithLabelValues(namespace, cache).Set(float64(notAfter.Unix()))
}

// The backups' metrics, per cache.
var (
	backupLastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cache_operator_backup_last_success_timestamp_seconds",
		Help: "When each cache's last completed backup started (Unix seconds).",
	}, []string{"namespace", "cache"})
	backupDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cache_operator_backup_duration_seconds",
		Help: "How long each cache's last completed backup took, from the Job's start to the manifest.",
	}, []string{"namespace", "cache"})
	backupBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cache_operator_backup_bytes",
		Help: "The size of each cache's last completed backup.",
	}, []string{"namespace", "cache"})
	backupInterval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cache_operator_backup_schedule_interval_seconds",
		Help: "The longest time between two slots of each cache's backup schedule (among its next eight); absent without a schedule.",
	}, []string{"namespace", "cache"})
	backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_backup_failures_total",
		Help: "Backups that failed, per cache.",
	}, []string{"namespace", "cache"})
	restores = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_restores_total",
		Help: "Restores (spec.restore) that completed or failed, per cache.",
	}, []string{"namespace", "cache", "result"})
)

func init() {
	register(backupLastSuccess, backupDuration, backupBytes, backupInterval, backupFailures, restores)
}

// BackupCompleted records a completed backup.
func BackupCompleted(namespace, cache string, start time.Time, took time.Duration, bytes int64) {
	backupLastSuccess.WithLabelValues(namespace, cache).Set(float64(start.Unix()))
	backupDuration.WithLabelValues(namespace, cache).Set(took.Seconds())
	backupBytes.WithLabelValues(namespace, cache).Set(float64(bytes))
}

// BackupSchedule records the longest interval between the slots of a cache's backup schedule;
// 0 drops it (no schedule).
func BackupSchedule(namespace, cache string, interval time.Duration) {
	if interval <= 0 {
		backupInterval.DeleteLabelValues(namespace, cache)
		return
	}
	backupInterval.WithLabelValues(namespace, cache).Set(interval.Seconds())
}

// BackupFailed counts a failed backup.
func BackupFailed(namespace, cache string) { backupFailures.WithLabelValues(namespace, cache).Inc() }

// RestoreFinished counts a restore that completed ("completed") or failed ("failed").
func RestoreFinished(namespace, cache, result string) {
	restores.WithLabelValues(namespace, cache, result).Inc()
}

// ForgetCertificate drops the certificate expiry of a cache that no longer serves TLS.
func ForgetCertificate(namespace, cache string) {
	certificateExpiry.DeleteLabelValues(namespace, cache)
}

// ForgetCache drops a deleted cache's series.
func ForgetCache(namespace, cache string) {
	certificateExpiry.DeleteLabelValues(namespace, cache)
	for _, v := range []*prometheus.GaugeVec{backupLastSuccess, backupDuration, backupBytes, backupInterval} {
		v.DeleteLabelValues(namespace, cache)
	}
	backupFailures.DeleteLabelValues(namespace, cache)
	dataLost.DeleteLabelValues(namespace, cache)
	dataLostKeys.DeleteLabelValues(namespace, cache)
	restores.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "cache": cache})
}

package backups

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/metrics"
	"example.com/cache-operator/engine/objectstore"
	"example.com/cache-operator/engine/render"
)

// storeTimeout bounds a check of the store (the client retries a refused connection within it).
const storeTimeout = 20 * time.Second

// pollRunning is how often a running backup is looked at without an event.
const pollRunning = 30 * time.Second

// sync advances every backup of the cache key, then applies retention and the schedule. It
// returns when to look again.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	mc, exists, err := c.caches.Cache(key)
	if err != nil {
		return 0, err
	}
	backups := c.backupsOf(key)
	if !exists {
		c.mu.Lock()
		held := c.state[key] != nil && c.state[key].held
		c.mu.Unlock()
		if ns, _, err := cache.SplitMetaNamespaceKey(key); err == nil && held {
			// A cache gone that held a store's Secret (released by the escape hatch, say): the
			// Secret is released unless another cache needs it.
			if err := c.releaseStores(ctx, ns, ""); err != nil {
				return 0, err
			}
		}
		c.forget(key)
		for _, b := range backups {
			if phaseOf(b) == "" || phaseOf(b) == api.BackupPending {
				if err := c.setStatus(ctx, b, backupStatus{Phase: api.BackupFailed, Reason: api.ReasonCacheGone,
					Message: fmt.Sprintf("ManagedCache %s does not exist", key)}); err != nil {
					return 0, err
				}
			}
		}
		return 0, nil
	}
	if mc.GetDeletionTimestamp() != nil {
		return 0, nil // the cache controller's finalizer deletes what onDelete says
	}
	spec, err := api.SpecFrom(mc)
	if err != nil {
		return 0, nil // the cache controller reports it
	}
	logger := klog.FromContext(ctx).WithValues("managedcache", key)
	ctx = klog.NewContext(ctx, logger)
	var after time.Duration
	soon := func(d time.Duration) {
		if d > 0 && (after == 0 || d < after) {
			after = d
		}
	}
	var errs error
	for _, b := range backups {
		var d time.Duration
		var err error
		switch phaseOf(b) {
		case "", api.BackupPending:
			d, err = c.start(ctx, mc, spec, b)
		case api.BackupRunning:
			d, err = c.watch(ctx, mc, b)
		}
		soon(d)
		errs = errors.Join(errs, err)
	}
	c.exportLastBackup(key, mc, backups)
	if spec.Backup != nil {
		soon(c.checkStore(ctx, mc, spec))
		d, err := c.schedule(ctx, mc, spec, backups)
		soon(d)
		errs = errors.Join(errs, err, c.retain(ctx, mc, spec, backups))
	} else {
		metrics.BackupSchedule(mc.GetNamespace(), mc.GetName(), 0)
	}
	return after, errs
}

// checkStore checks the cache's store (its Secret, the endpoint, the bucket) every StoreCheck and
// records the outcome as the cache's BackupsReady condition, with a Warning Event when it turns
// bad. It returns when to check again.
func (c *Controller) checkStore(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec) time.Duration {
	key := mc.GetNamespace() + "/" + mc.GetName()
	st := c.stateOf(key)
	now := c.opts.Now()
	if !st.checked.IsZero() && now.Sub(st.checked) < c.opts.StoreCheck && st.condition.Status == metav1.ConditionTrue {
		return st.checked.Add(c.opts.StoreCheck).Sub(now)
	}
	reason, msg := api.ReasonStoreReachable, ""
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	store, sec, err := c.storeSecret(ctx, mc.GetNamespace(), spec.Backup.StoreSecret)
	switch {
	case sec != nil && err == nil && spec.Backup.OnDelete == api.BackupDelete && sec.DeletionTimestamp == nil:
		// The cache's deletion needs the Secret: it stays until then. Only a Secret that reads as
		// a store is held (any Secret a tenant names got the finalizer, a store or not).
		if herr := c.holdStore(ctx, sec); herr != nil {
			klog.FromContext(ctx).Error(herr, "Holding the store's Secret for the cache's deletion")
		} else {
			c.mu.Lock()
			c.stateLocked(key).held = true
			c.mu.Unlock()
		}
	case sec != nil && spec.Backup.OnDelete != api.BackupDelete && hasFinalizer(sec):
		// Retain now, or held for another cache: released unless another cache needs it.
		if rerr := c.releaseStores(ctx, mc.GetNamespace(), ""); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Releasing store Secrets")
		}
	}
	var cl *minio.Client
	if err == nil {
		cl, err = store.Client()
	}
	if err == nil {
		msg = "the store answers and bucket " + store.Bucket + " exists"
		if err = objectstore.Check(ctx, cl, store.Bucket); err != nil {
			reason = api.ReasonStoreUnreachable
			if strings.Contains(err.Error(), "does not exist") {
				reason = api.ReasonBucketNotFound
			}
		}
	} else {
		reason = api.ReasonStoreSecretInvalid
		if strings.Contains(err.Error(), "unreachable") {
			reason = api.ReasonStoreUnreachable
		}
	}
	if err == nil && spec.Backup.Schedule != "" {
		if _, perr := parseSchedule(spec.Backup.Schedule); perr != nil {
			reason, err = api.ReasonScheduleInvalid, perr
		}
	}
	if err != nil {
		msg = err.Error()
	}
	c.setCondition(mc, reason, msg, err == nil)
	st.checked = now
	if err != nil {
		return time.Minute // bad input: look again soon, the cache keeps serving meanwhile
	}
	return c.opts.StoreCheck
}

// setCondition records the cache's BackupsReady condition and has the cache controller write it
// when it changed; a change to False gets a Warning Event.
func (c *Controller) setCondition(mc *unstructured.Unstructured, reason, msg string, ok bool) {
	key := mc.GetNamespace() + "/" + mc.GetName()
	st := c.stateOf(key)
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	c.mu.Lock()
	changed := st.condition.Status != status || st.condition.Reason != reason || st.condition.Message != msg
	st.condition = metav1.Condition{Type: api.ConditionBackupsReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: mc.GetGeneration()}
	c.mu.Unlock()
	if !changed {
		return
	}
	if !ok {
		c.recorder.Eventf(mc, corev1.EventTypeWarning, reason, "Backups: %s", msg)
	}
	c.reconciles.Add(key)
}

// start takes a pending backup: it chooses the member, renders the Job and creates it.
func (c *Controller) start(ctx context.Context, mc *unstructured.Unstructured, spec api.Spec, b *unstructured.Unstructured) (time.Duration, error) {
	if spec.Backup == nil {
		return 0, c.fail(ctx, mc, b, backupStatus{}, api.ReasonNoBackupConfigured, fmt.Sprintf("ManagedCache %s has no spec.backup (the store to back up to)", mc.GetName()))
	}
	store, cl, err := c.storeClient(ctx, mc.GetNamespace(), spec.Backup.StoreSecret)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, storeTimeout)
		err = objectstore.Check(cctx, cl, store.Bucket)
		cancel()
	}
	if err != nil {
		reason := api.ReasonStoreUnreachable
		if strings.Contains(err.Error(), "Secret") || strings.Contains(err.Error(), "missing keys") {
			reason = api.ReasonStoreSecretInvalid
		}
		return 0, c.fail(ctx, mc, b, backupStatus{}, reason, err.Error())
	}
	if spec.Sharded() {
		return c.startSharded(ctx, mc, spec, b, store)
	}
	member, host, fromPrimary, why := chooseMember(mc, c.opts.Render.ClusterDomain)
	if member == "" {
		st := backupStatus{Phase: api.BackupPending, Reason: api.ReasonCacheNotReady, Message: why}
		return 10 * time.Second, c.setStatus(ctx, b, st)
	}
	key := store.ObjectKey(mc.GetNamespace(), mc.GetName(), b.GetName())
	jobName := api.BackupJobName(b.GetName())
	job, err := c.renderer.BackupJobFor(mc, b, spec, c.opts.Render, render.BackupJob{
		Name: b.GetName(), JobName: jobName, StoreSecret: spec.Backup.StoreSecret,
		Parts: []render.BackupPart{{Container: "backup", Member: member, MemberHost: host, FromPrimary: fromPrimary, ObjectKey: key}},
	})
	if err != nil {
		return 0, c.fail(ctx, mc, b, backupStatus{}, "RenderFailed", err.Error())
	}
	if d, err := c.createJob(ctx, mc, job); d > 0 || err != nil {
		return d, err
	}
	reason, msg := api.ReasonFromReplica, fmt.Sprintf("streaming replica %s, in sync with the primary", member)
	if fromPrimary {
		reason, msg = api.ReasonFromPrimary, "no replica is in sync: streaming the primary "+member+" (it forks for the snapshot)"
	}
	st := backupStatus{Phase: api.BackupRunning, Reason: reason, Message: msg, StartTime: c.opts.Now().UTC().Format(time.RFC3339),
		Member: member, Engine: spec.Engine.Name, Location: store.Location(key), StoreSecret: spec.Backup.StoreSecret, Job: jobName}
	c.recorder.Eventf(b, corev1.EventTypeNormal, api.EventBackupStarted, "Backing up %s from %s to %s", mc.GetName(), member, st.Location)
	c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventBackupStarted, "Backup %s: %s, to %s", b.GetName(), msg, st.Location)
	return pollRunning, c.setStatus(ctx, b, st)
}

// createJob creates a backup's Job. A Job that exists already was started by an earlier pass
// whose status write the informer does not show yet: it is waited for (a delay), unless it is old
// enough that the write must have been lost (the operator stopped between the two), which the
// caller then makes now.
func (c *Controller) createJob(ctx context.Context, mc, job *unstructured.Unstructured) (time.Duration, error) {
	_, err := c.client.Resource(api.JobResource).Namespace(mc.GetNamespace()).Create(ctx, job, metav1.CreateOptions{FieldManager: api.FieldManager})
	switch {
	case apierrors.IsAlreadyExists(err):
		if existing := c.job(mc.GetNamespace(), job.GetName()); existing == nil || c.opts.Now().Sub(existing.GetCreationTimestamp().Time) < 10*time.Second {
			return 2 * time.Second, nil
		}
	case err != nil:
		return 0, fmt.Errorf("Job/%s/%s: %w", mc.GetNamespace(), job.GetName(), err)
	}
	return 0, nil
}

// chooseMember picks the member to back up from the cache's status: a replica in sync with the
// primary (listed without lag) when there is one, the highest ordinal first; otherwise the
// primary. It returns the pod, its stable DNS name, whether it is the primary, and why there is
// none.
func chooseMember(mc *unstructured.Unstructured, domain string) (pod, host string, fromPrimary bool, why string) {
	primary := api.PrimaryOf(mc)
	if primary == "" {
		return "", "", false, "the cache has no primary yet"
	}
	members, _, _ := unstructured.NestedSlice(mc.Object, "status", "members")
	var inSync []string
	for _, m := range members {
		mm, _ := m.(map[string]interface{})
		name, _ := mm["name"].(string)
		_, lagging := mm["lagBytes"]
		if mm["role"] == api.RoleReplica && !lagging && name != "" {
			inSync = append(inSync, name)
		}
	}
	pick := primary
	if len(inSync) > 0 {
		sort.Strings(inSync)
		pick = inSync[len(inSync)-1]
	}
	host = api.ServiceHost(pick+"."+mc.GetName(), mc.GetNamespace(), domain)
	return pick, host, pick == primary, ""
}

// watch follows a running backup's Job: complete, the manifest it wrote fills the status; failed,
// its pod's termination message says why.
func (c *Controller) watch(ctx context.Context, mc *unstructured.Unstructured, b *unstructured.Unstructured) (time.Duration, error) {
	st := statusOfBackup(b)
	job := c.job(b.GetNamespace(), st.Job)
	if job == nil {
		started, _ := time.Parse(time.RFC3339, st.StartTime)
		if c.opts.Now().Sub(started) < time.Minute {
			return 5 * time.Second, nil // the informer has not seen it yet
		}
		return 0, c.fail(ctx, mc, b, st, api.ReasonJobMissing, "the Job "+st.Job+" is gone")
	}
	switch {
	case jobCondition(job, "Complete") && len(st.Shards) > 0:
		return c.completeSharded(ctx, mc, b, st)
	case jobCondition(job, "Complete"):
		store, cl, err := c.storeClient(ctx, b.GetNamespace(), st.StoreSecret)
		if err != nil {
			return 0, err
		}
		key := strings.TrimPrefix(st.Location, "s3://"+store.Bucket+"/")
		m, err := objectstore.ReadManifest(ctx, cl, store.Bucket, key)
		if minio.ToErrorResponse(errors.Unwrap(err)).Code == "NoSuchKey" || minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return 0, c.fail(ctx, mc, b, st, api.ReasonManifestUnreadable, "the Job completed but "+objectstore.ManifestKey(st.Location)+" does not exist: the backup did not finish")
		}
		if err != nil {
			return 0, fmt.Errorf("ManagedCacheBackup/%s/%s: reading the manifest: %w", b.GetNamespace(), b.GetName(), err)
		}
		// The reason stays FromReplica or FromPrimary: where it was taken from.
		st.Phase = api.BackupCompleted
		st.Message = fmt.Sprintf("%d bytes, %d keys from %s (%s %s)", m.Bytes, m.Keys, m.Member, m.Engine, m.Version)
		if m.FromPrimary {
			st.Message += "; taken from the primary: no replica was in sync"
		}
		st.EndTime = c.opts.Now().UTC().Format(time.RFC3339)
		st.Bytes, st.Keys, st.Checksum, st.Engine, st.Version = m.Bytes, m.Keys, m.SHA256, m.Engine, m.Version
		if err := c.setStatus(ctx, b, st); err != nil {
			return 0, err
		}
		start, _ := time.Parse(time.RFC3339, st.StartTime)
		metrics.BackupCompleted(mc.GetNamespace(), mc.GetName(), start, m.End.Sub(m.Start), m.Bytes)
		c.markExported(mc.GetNamespace()+"/"+mc.GetName(), start)
		c.recorder.Eventf(b, corev1.EventTypeNormal, api.EventBackupCompleted, "%s: %s", st.Location, st.Message)
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventBackupCompleted, "Backup %s completed: %s", b.GetName(), st.Message)
		c.reconciles.Add(mc.GetNamespace() + "/" + mc.GetName())
		return 0, nil
	case jobCondition(job, "Failed"):
		return 0, c.fail(ctx, mc, b, st, api.ReasonJobFailed, c.jobFailure(ctx, job))
	}
	return pollRunning, nil
}

// jobFailure is why a Job failed: its last pod's termination message, or the Job's condition.
func (c *Controller) jobFailure(ctx context.Context, job *unstructured.Unstructured) string {
	pods, err := c.kube.CoreV1().Pods(job.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.GetName()})
	if err == nil {
		for i := len(pods.Items) - 1; i >= 0; i-- {
			for _, cs := range pods.Items[i].Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
					if t.Message != "" {
						return strings.TrimSpace(t.Message)
					}
					return fmt.Sprintf("the backup container exited with %d", t.ExitCode)
				}
			}
		}
	}
	conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
	for _, r := range conds {
		if m, _ := r.(map[string]interface{}); m["type"] == "Failed" {
			return fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	return "the Job failed"
}

func jobCondition(job *unstructured.Unstructured, t string) bool {
	conds, _, _ := unstructured.NestedSlice(job.Object, "status", "conditions")
	for _, r := range conds {
		if m, _ := r.(map[string]interface{}); m["type"] == t && m["status"] == "True" {
			return true
		}
	}
	return false
}

// fail marks a backup Failed with reason, with Warning Events and the failures metric.
func (c *Controller) fail(ctx context.Context, mc, b *unstructured.Unstructured, st backupStatus, reason, msg string) error {
	st.Phase, st.Reason, st.Message = api.BackupFailed, reason, msg
	if st.EndTime == "" {
		st.EndTime = c.opts.Now().UTC().Format(time.RFC3339)
	}
	if err := c.setStatus(ctx, b, st); err != nil {
		return err
	}
	metrics.BackupFailed(mc.GetNamespace(), mc.GetName())
	c.recorder.Eventf(b, corev1.EventTypeWarning, api.EventBackupFailed, "%s: %s", reason, msg)
	c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventBackupFailed, "Backup %s failed (%s): %s", b.GetName(), reason, msg)
	klog.FromContext(ctx).Info("Backup failed", "backup", b.GetName(), "reason", reason, "message", msg)
	return nil
}

// sortedCopies returns copies of the informer's objects indexed under key, oldest first.
func sortedCopies(inf cache.SharedIndexInformer, key string) []*unstructured.Unstructured {
	objs, _ := inf.GetIndexer().ByIndex(byCache, key)
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*unstructured.Unstructured).DeepCopy())
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].GetCreationTimestamp(), out[j].GetCreationTimestamp()
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

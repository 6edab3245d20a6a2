package backups

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"example.com/cache-operator/engine/api"
)

// backupStatus is a ManagedCacheBackup's status, as the CRD declares it.
type backupStatus struct {
	Phase       string `json:"phase,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	StartTime   string `json:"startTime,omitempty"`
	EndTime     string `json:"endTime,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"`
	Keys        int64  `json:"keys,omitempty"`
	Checksum    string `json:"checksum,omitempty"`
	Engine      string `json:"engine,omitempty"`
	Version     string `json:"version,omitempty"`
	Member      string `json:"member,omitempty"`
	Location    string `json:"location,omitempty"`
	StoreSecret string `json:"storeSecret,omitempty"`
	Job         string `json:"job,omitempty"`
}

func statusOfBackup(b *unstructured.Unstructured) backupStatus {
	var s backupStatus
	if raw, ok := b.Object["status"].(map[string]interface{}); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s)
	}
	return s
}

func phaseOf(b *unstructured.Unstructured) string { return statusOfBackup(b).Phase }

// setStatus writes a backup's status when it changed (over the resourceVersion read: a conflict is
// retried from the informer's newer copy).
func (c *Controller) setStatus(ctx context.Context, b *unstructured.Unstructured, s backupStatus) error {
	if reflect.DeepEqual(statusOfBackup(b), s) {
		return nil
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
	if err != nil {
		return err
	}
	out := b.DeepCopy()
	out.Object["status"] = raw
	if _, err := c.client.Resource(api.BackupResource).Namespace(b.GetNamespace()).UpdateStatus(ctx, out, metav1.UpdateOptions{FieldManager: api.FieldManager}); err != nil {
		return fmt.Errorf("ManagedCacheBackup/%s/%s: writing status: %w", b.GetNamespace(), b.GetName(), err)
	}
	b.Object["status"] = raw
	return nil
}

func ptrUID(o metav1.Object) *types.UID {
	u := o.GetUID()
	return &u
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

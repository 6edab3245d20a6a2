package informers

import (
	"hash/fnv"
	"io"
	"sort"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Version digests a child's version as the drift check sees it: its UID and generation (or the
// resourceVersion of a kind without one, such as Secrets and Services) and the metadata the drift
// check compares. It gives the same digest for an object as the informer holds it (Object) and
// decoded.
func Version(o metav1.Object) uint64 {
	h := fnv.New64a()
	if g := o.GetGeneration(); g != 0 {
		WriteFields(h, string(o.GetUID()), "g", strconv.FormatInt(g, 10))
	} else {
		WriteFields(h, string(o.GetUID()), "rv", o.GetResourceVersion())
	}
	WriteMap(h, o.GetLabels())
	WriteMap(h, o.GetAnnotations())
	for _, r := range o.GetOwnerReferences() {
		WriteFields(h, r.APIVersion, r.Kind, r.Name, string(r.UID),
			strconv.FormatBool(r.Controller != nil && *r.Controller), strconv.FormatBool(r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion))
	}
	WriteFields(h, o.GetFinalizers()...)
	if t := o.GetDeletionTimestamp(); t != nil {
		WriteFields(h, "deleting")
	}
	return h.Sum64()
}

// WriteFields writes each field to a digest, and a separator no field contains.
func WriteFields(w io.Writer, fields ...string) {
	for _, f := range fields {
		_, _ = io.WriteString(w, f)
		_, _ = w.Write([]byte{0})
	}
	_, _ = w.Write([]byte{1})
}

// WriteMap writes a map to a digest,'s entries in key order.
func WriteMap(w io.Writer, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		WriteFields(w, k, m[k])
	}
	_, _ = w.Write([]byte{2})
}

// StatusOnlyChildUpdate reports whether an update of a child, as the informers hold it, changed
// only what no reconcile reads (status, managedFields): the version digest stands for the
// generation and the metadata compared. A kind without a generation never counts as status-only.
func StatusOnlyChildUpdate(old, cur interface{}) bool {
	o, ok1 := old.(*Object)
	n, ok2 := cur.(*Object)
	if !ok1 || !ok2 {
		return false
	}
	return n.GetGeneration() != 0 && o.Version == n.Version
}

// Package engine is the ManagedCache operator: it renders a ManagedCache into its children from
// the templates, compares each child with the live object from an informer cache, applies only
// what drifted (server-side apply, one field manager), and keeps the cache's status conditions.
//
// It works on unstructured.Unstructured objects through the dynamic client and dynamic
// informers, with no generated types, and deliberately without controller-runtime: the operator
// needs one workqueue of ManagedCache keys, a handful of informers and an apply loop, all of which
// client-go provides directly, and owning them keeps every API request visible (a reconcile of a
// cache that is already right makes none).
//
// What it is not for: it does not run Redis, talk to Redis, or manage anything outside the
// cluster (the finalizer's cleanup hooks are where such work would plug in).
package engine

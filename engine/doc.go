// Package engine holds the ManagedCache operator, one package per concern. It has no code of its
// own; read the packages in this order:
//
//   - api: the ManagedCache API as the operator sees it (names, labels, port, a cache's spec with
//     the CRD's defaults, validated);
//   - render: the templates/ folder rendered into a cache's children;
//   - ssa: drift check and server-side apply of unstructured objects, with no knowledge of
//     ManagedCaches;
//   - controller: the reconcile loop that ties them together (informers, one queue of cache keys,
//     ownership, the password Secret, status conditions, the finalizer);
//   - metrics: the Prometheus registry;
//   - conversion, admission, webhook: the API server's conversion and validating webhooks;
//   - app: one process wiring all of the above, with leader election.
package engine

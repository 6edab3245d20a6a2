// Package engine holds the ManagedCache operator, one package per concern. It has no code of its
// own; it is the map. Read the packages in this order:
//
//   - api: the ManagedCache API as the operator sees it (names, labels, port, a cache's spec with
//     the CRD's defaults, validated);
//   - render: the templates/ folder rendered into a cache's children;
//   - ssa: drift check and server-side apply of unstructured objects, with no knowledge of
//     ManagedCaches;
//   - informers: what the operator watches (ManagedCaches, every child kind, the members' pods)
//     and how it holds them: packed, with lookups by name;
//   - controller: the reconcile loop that ties render, ssa and informers together (one queue of
//     cache keys, ownership, the Secret written once, storage growth, the finalizer, the verified
//     pass, the status written, and what a deleted child must not cost: protection.go);
//   - storage: the volumes, owned by the cache and grown on request;
//   - status: a cache's status computed from what a reconcile saw, every condition decided in one
//     place (conditions.go), hibernation's steps, and which changes are progress only;
//   - credentials: the cache's Secret, read in one place; passwords generated once, rotated with
//     an overlap, refused with a reason; what each member's users are to accept;
//   - roles: who the primary is and what to do next, as one pure function (elections, failover,
//     switchover, the order of a roll);
//   - dataplane: the member passes that carry it out on the members' servers, and keep their live
//     settings and credentials current without a restart;
//   - member: the Redis protocol side of one member (INFO, REPLICAOF, FAILOVER, ACL, CONFIG);
//   - metrics: the Prometheus registry;
//   - conversion, admission, webhook: the API server's conversion and validating webhooks;
//   - app: one process wiring all of the above, with leader election.
package engine

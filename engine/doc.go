// Package engine holds the ManagedCache operator, one package per concern. It has no code of its
// own. The map of every package, generated from their package comments and checked by a test, is
// docs/architecture.md ("The packages").
package engine

// Package crd embeds the ManagedCache CustomResourceDefinition, the one place where the API's
// schema, validation and defaults are written. The operator reads its defaults from here (package
// engine/api), so that an object the API server did not default renders as if it had.
package crd

import _ "embed"

// ManagedCaches is the CustomResourceDefinition of managedcaches.cache.example.com, as YAML.
//
//go:embed cache.example.com_managedcaches.yaml
var ManagedCaches []byte

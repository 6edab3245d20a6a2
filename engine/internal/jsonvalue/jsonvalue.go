// Package jsonvalue compares values decoded from JSON, whatever Go type the decoder chose for a
// number (int64 from the API machinery, float64 or json.Number from encoding/json).
package jsonvalue

import "encoding/json"

// Number returns v as a float64 when it is a number.
func Number(v interface{}) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

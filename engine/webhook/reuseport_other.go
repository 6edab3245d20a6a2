//go:build !linux

package webhook

import "syscall"

func reusePort(_, _ string, _ syscall.RawConn) error { return nil }

package webhook

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort lets several operator processes on one host listen on the same address (the kernel
// spreads connections), as replicas behind a Service would be reached.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

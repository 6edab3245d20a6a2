package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Source is a member to take a snapshot from, reached as a replica would reach it.
type Source struct {
	// Addr is host:port.
	Addr string
	// User and Password authenticate (the internal user: PSYNC, REPLCONF and INFO are its).
	User, Password string
	// TLS, when set, wraps the connection.
	TLS *tls.Config
	// IdleTimeout bounds the wait for each read (the member forks and starts streaming within
	// seconds; a stall longer than this fails the backup).
	IdleTimeout time.Duration
}

// Server is what the member says it runs.
type Server struct {
	Engine, Version string
}

// replicaConn is a connection to a member speaking the replication protocol.
type replicaConn struct {
	conn net.Conn
	r    *bufio.Reader
	idle time.Duration
}

// Dial connects and authenticates.
func dial(ctx context.Context, src Source) (*replicaConn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", src.Addr)
	if err != nil {
		return nil, err
	}
	if src.TLS != nil {
		tc := tls.Client(conn, src.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", src.Addr, err)
		}
		conn = tc
	}
	idle := src.IdleTimeout
	if idle <= 0 {
		idle = time.Minute
	}
	c := &replicaConn{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), idle: idle}
	if _, err := c.command("AUTH", src.User, src.Password); err != nil {
		conn.Close()
		return nil, fmt.Errorf("AUTH as %s: %w", src.User, err)
	}
	return c, nil
}

func (c *replicaConn) Close() error { return c.conn.Close() }

func (c *replicaConn) send(args ...string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	c.conn.SetWriteDeadline(time.Now().Add(c.idle))
	_, err := c.conn.Write(b.Bytes())
	return err
}

func (c *replicaConn) line() (string, error) {
	c.conn.SetReadDeadline(time.Now().Add(c.idle))
	l, err := c.r.ReadString('\n')
	return strings.TrimRight(l, "\r\n"), err
}

// command sends a command and reads a simple or bulk reply.
func (c *replicaConn) command(args ...string) (string, error) {
	if err := c.send(args...); err != nil {
		return "", err
	}
	l, err := c.line()
	if err != nil {
		return "", err
	}
	switch {
	case strings.HasPrefix(l, "+"):
		return l[1:], nil
	case strings.HasPrefix(l, "-"):
		return "", fmt.Errorf("%s", l[1:])
	case strings.HasPrefix(l, "$"):
		n, err := strconv.Atoi(l[1:])
		if err != nil || n < 0 || n > 1<<20 {
			return "", fmt.Errorf("unexpected reply %q", l)
		}
		buf := make([]byte, n+2)
		c.conn.SetReadDeadline(time.Now().Add(c.idle))
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", l)
}

// server reads INFO server: the engine (valkey reports server_name) and its version.
func (c *replicaConn) server() (Server, error) {
	info, err := c.command("INFO", "server")
	if err != nil {
		return Server{}, fmt.Errorf("INFO server: %w", err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			fields[k] = v
		}
	}
	s := Server{Engine: "redis", Version: fields["redis_version"]}
	if fields["server_name"] == "valkey" || fields["valkey_version"] != "" {
		s.Engine, s.Version = "valkey", fields["valkey_version"]
	}
	if s.Version == "" {
		return s, fmt.Errorf("INFO server names no version")
	}
	return s, nil
}

// fullSync asks for a full synchronisation (PSYNC ? -1, with the EOF-marked diskless format
// offered) and returns a reader of the snapshot alone: the member forks (a replica serves it from
// its own fork, never the primary's), streams, and the reader ends at the snapshot's end.
func (c *replicaConn) fullSync() (io.Reader, error) {
	if _, err := c.command("REPLCONF", "capa", "eof", "capa", "psync2"); err != nil {
		return nil, fmt.Errorf("REPLCONF capa: %w", err)
	}
	if err := c.send("PSYNC", "?", "-1"); err != nil {
		return nil, err
	}
	for {
		l, err := c.line()
		if err != nil {
			return nil, fmt.Errorf("waiting for the snapshot: %w", err)
		}
		switch {
		case l == "": // keep-alive newlines while the member prepares
			continue
		case strings.HasPrefix(l, "+FULLRESYNC"), strings.HasPrefix(l, "+CONTINUE"):
			continue
		case strings.HasPrefix(l, "-"):
			return nil, fmt.Errorf("PSYNC: %s", l[1:])
		case strings.HasPrefix(l, "$EOF:"):
			mark := []byte(l[5:])
			if len(mark) != 40 {
				return nil, fmt.Errorf("PSYNC: bad end mark %q", l)
			}
			return &markReader{c: c, mark: mark}, nil
		case strings.HasPrefix(l, "$"):
			n, err := strconv.ParseInt(l[1:], 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("PSYNC: bad length %q", l)
			}
			return &deadlineReader{c: c, r: io.LimitReader(c.r, n), n: n}, nil
		default:
			return nil, fmt.Errorf("PSYNC: unexpected reply %q", l)
		}
	}
}

// deadlineReader reads a snapshot of known length, each read under the idle timeout.
type deadlineReader struct {
	c    *replicaConn
	r    io.Reader
	n    int64
	read int64
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	d.c.conn.SetReadDeadline(time.Now().Add(d.c.idle))
	n, err := d.r.Read(p)
	d.read += int64(n)
	if err == io.EOF && d.read < d.n {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// markReader reads a diskless snapshot, which ends with the 40-byte mark announced before it (the
// replication stream follows): it holds back the last 39 bytes read until it knows they do not
// begin the mark.
type markReader struct {
	c     *replicaConn
	mark  []byte
	buf   []byte // read, not yet known to be data
	out   []byte // known data, not yet returned
	chunk []byte
	done  bool
}

func (m *markReader) Read(p []byte) (int, error) {
	for {
		if len(m.out) > 0 {
			n := copy(p, m.out)
			m.out = m.out[n:]
			return n, nil
		}
		if m.done {
			return 0, io.EOF
		}
		if i := bytes.Index(m.buf, m.mark); i >= 0 {
			m.out, m.buf, m.done = m.buf[:i], nil, true
			continue
		}
		if cut := len(m.buf) - (len(m.mark) - 1); cut > 0 {
			m.out = m.buf[:cut]
			m.buf = append([]byte(nil), m.buf[cut:]...)
			continue
		}
		if m.chunk == nil {
			m.chunk = make([]byte, 64<<10)
		}
		m.c.conn.SetReadDeadline(time.Now().Add(m.c.idle))
		n, err := m.c.r.Read(m.chunk)
		m.buf = append(m.buf, m.chunk[:n]...)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("the snapshot stream ended before its end mark: %w", err)
		}
	}
}

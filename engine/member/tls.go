package member

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ServedSerial opens a TLS connection of its own to the server at addr (a fresh handshake: a
// pooled connection shows the certificate of when it was made) and returns the serial (hex) of the
// certificate the server serves now. cfg must accept the server's certificate.
func ServedSerial(ctx context.Context, addr string, cfg *tls.Config) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("member %s: TLS handshake: %w", addr, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "", fmt.Errorf("member %s: no certificate served", addr)
	}
	return certs[0].SerialNumber.Text(16), nil
}

// ReloadTLS makes a server load its TLS files again (the certificate, its key and the CA bundle),
// with no restart: connections stay up, new ones get the new certificate. A CONFIG SET of a
// setting to the value it has does nothing, so the paths are given in their other spelling (with
// or without "./" before the file name), which names the same files.
func ReloadTLS(ctx context.Context, c *redis.Client) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	names := []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file"}
	args := []interface{}{"CONFIG", "SET"}
	for _, n := range names {
		have, err := c.ConfigGet(ctx, n).Result()
		if err != nil {
			return fmt.Errorf("member %s: CONFIG GET %s: %w", c.Options().Addr, n, err)
		}
		path := have[n]
		if path == "" {
			return fmt.Errorf("member %s: %s is not set: the server does not serve TLS", c.Options().Addr, n)
		}
		args = append(args, n, otherSpelling(path))
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("member %s: reloading the TLS files: %w", c.Options().Addr, err)
	}
	return nil
}

// otherSpelling is path with "./" before its last element added or removed.
func otherSpelling(path string) string {
	i := strings.LastIndexByte(path, '/')
	dir, file := path[:i+1], path[i+1:]
	if strings.HasSuffix(dir, "/./") {
		return strings.TrimSuffix(dir, "./") + file
	}
	return dir + "./" + file
}

// ReplicateOverTLS makes a member reach its primary over TLS or in plain text (CONFIG SET
// tls-replication), if it does not already: a replica follows its primary's mode. A member without
// TLS files cannot reach a TLS primary (the server refuses the setting).
func ReplicateOverTLS(ctx context.Context, c *redis.Client, on bool) (changed bool, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	want := "no"
	if on {
		want = "yes"
	}
	have, err := c.ConfigGet(ctx, "tls-replication").Result()
	if err != nil {
		return false, fmt.Errorf("member %s: CONFIG GET tls-replication: %w", c.Options().Addr, err)
	}
	if have["tls-replication"] == want {
		return false, nil
	}
	if err := c.ConfigSet(ctx, "tls-replication", want).Err(); err != nil {
		return false, fmt.Errorf("member %s: CONFIG SET tls-replication %s: %w", c.Options().Addr, want, err)
	}
	return true, nil
}

package snapshot

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func rdbString(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// smallRDB is a snapshot of two keys in database 0 and one in database 3.
func smallRDB() []byte {
	var b bytes.Buffer
	b.WriteString("REDIS0010")
	b.WriteByte(0xFA)
	b.Write(rdbString("redis-ver"))
	b.Write(rdbString("7.0.15"))
	b.WriteByte(0xFA)
	b.Write(rdbString("ctime"))
	b.Write([]byte{0xC2, 1, 2, 3, 4}) // an int32-encoded string
	b.Write([]byte{0xFE, 0, 0xFB, 2, 0})
	b.WriteByte(0)
	b.Write(rdbString("a"))
	b.Write(rdbString("1"))
	b.WriteByte(0xFC)
	b.Write(make([]byte, 8)) // an expiry
	b.WriteByte(1)           // a list of two
	b.Write(rdbString("b"))
	b.WriteByte(2)
	b.Write(rdbString("x"))
	b.Write(rdbString("y"))
	b.Write([]byte{0xFE, 3, 0xFB, 1, 1})
	b.WriteByte(0)
	b.Write(rdbString("c"))
	b.Write([]byte{0xC3, 2, 5, 'a', 'b'}) // an LZF string: its compressed bytes skipped
	b.WriteByte(0xFF)
	b.Write(make([]byte, 8))
	return b.Bytes()
}

func TestScanRDB(t *testing.T) {
	info, err := ScanRDB(bytes.NewReader(smallRDB()))
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != 10 || info.Aux["redis-ver"] != "7.0.15" || info.Aux["ctime"] != "67305985" || info.Keys != 3 || !info.Complete {
		t.Errorf("ScanRDB = %+v; want version 10, redis-ver 7.0.15, 3 keys, complete", info)
	}
	full := smallRDB()
	for _, cut := range []int{5, 20, len(full) - 12, len(full) - 3} {
		if _, err := ScanRDB(bytes.NewReader(full[:cut])); err == nil {
			t.Errorf("a snapshot cut at %d of %d bytes scanned without an error", cut, len(full))
		}
	}
	if _, err := ScanRDB(strings.NewReader("NOTREDIS0010")); err == nil {
		t.Error("a file that is not a snapshot scanned")
	}
}

// markReader returns exactly the bytes before the end mark, whatever the chunking, and leaves
// what follows the mark (the replication stream).
func TestMarkReader(t *testing.T) {
	mark := []byte(strings.Repeat("m", 39) + "M")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10000)
	payload = append(payload, mark[:30]...) // a near-mark inside the data
	payload = append(payload, 'z')
	stream := append(append(append([]byte{}, payload...), mark...), []byte("*1\r\n$4\r\nPING\r\n")...)
	for _, chunk := range []int{1, 7, 40, 4096, len(stream)} {
		server, client := net.Pipe()
		go func() {
			for i := 0; i < len(stream); i += chunk {
				_, _ = server.Write(stream[i:min(i+chunk, len(stream))])
			}
			server.Close()
		}()
		c := &replicaConn{conn: client, r: bufio.NewReader(client), idle: 5 * time.Second}
		got, err := io.ReadAll(&markReader{c: c, mark: mark})
		client.Close()
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("chunks of %d: read %d bytes (%v); want the %d before the mark", chunk, len(got), err, len(payload))
		}
	}
	// A stream that ends before its mark is an error, not a short snapshot.
	server, client := net.Pipe()
	go func() { _, _ = server.Write(payload[:1000]); server.Close() }()
	c := &replicaConn{conn: client, r: bufio.NewReader(client), idle: 5 * time.Second}
	if _, err := io.ReadAll(&markReader{c: c, mark: mark}); err == nil {
		t.Error("a stream cut before its mark read without an error")
	}
}

// The restore container does nothing once the cache's restore completed (the ConfigMap says so),
// even on the first member with an empty volume; fails on the first member with the operator's
// refusal; and on any other member reports it and lets the member start (it syncs instead).
func TestRestoreCommandOnceCompleted(t *testing.T) {
	t.Setenv(EnvPodName, "c-0")
	t.Setenv(EnvRestoreMember, "c-0")
	t.Setenv(EnvDataDir, t.TempDir())
	t.Setenv(EnvRestoreState, "completed")
	t.Setenv(EnvRefused, "")
	var out, errOut bytes.Buffer
	if rc := RestoreCommand(&out, &errOut); rc != 0 || !strings.Contains(out.String(), "completed before") {
		t.Errorf("completed restore: exit %d, %q %q", rc, out.String(), errOut.String())
	}
	t.Setenv(EnvRestoreState, "pending")
	t.Setenv(EnvRefused, "a newer major version")
	out.Reset()
	errOut.Reset()
	if rc := RestoreCommand(&out, &errOut); rc != 1 || !strings.Contains(errOut.String(), "a newer major version") {
		t.Errorf("refused restore: exit %d, %q", rc, errOut.String())
	}
	t.Setenv(EnvPodName, "c-1")
	out.Reset()
	if rc := RestoreCommand(&out, &errOut); rc != 0 || !strings.Contains(out.String(), "a newer major version") || !strings.Contains(out.String(), "syncs from the primary") {
		t.Errorf("another member: exit %d, %q", rc, out.String())
	}
}

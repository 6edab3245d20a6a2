package membertest

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// ClaimMasterAsItself sends the cluster-mode server whose cluster bus is at busAddr one PONG in
// its own name (id, its node ID) that says it is a master serving no slot, with epochs of 0, and
// closes the connection. It is the message a restarted former primary sends itself when it
// reaches its own address through a peer's stale entry (two members' addresses swapped) and
// takes after the cluster has made it a replica: the engine's role switch then flags it master
// (no slots) while its replication still follows its primary (redis/redis#9374). The header is
// the bus protocol's version 1 (Redis 7 and 8, Valkey 8), with no gossip and no extension.
func ClaimMasterAsItself(t testing.TB, busAddr, id string) {
	t.Helper()
	if len(id) != 40 {
		t.Fatalf("a node ID has 40 characters: %q", id)
	}
	const (
		headerLen = 2256 // sizeof(clusterMsg) - sizeof(union clusterMsgData)
		pong      = 1
		master    = 1 // CLUSTER_NODE_MASTER
	)
	msg := make([]byte, headerLen)
	copy(msg[0:4], "RCmb")
	binary.BigEndian.PutUint32(msg[4:8], headerLen)
	binary.BigEndian.PutUint16(msg[8:10], 1) // protocol version
	binary.BigEndian.PutUint16(msg[12:14], pong)
	copy(msg[40:80], id) // sender; myslots (80:2128) and slaveof (2128:2168) stay zero: a master of nothing
	binary.BigEndian.PutUint16(msg[2250:2252], master)
	conn, err := net.DialTimeout("tcp", busAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("the cluster bus at %s: %v", busAddr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(msg); err != nil {
		t.Fatalf("writing to the cluster bus at %s: %v", busAddr, err)
	}
	// The server reads the message before it sees the connection close: wait for its close (it
	// answers a PONG with nothing) or the deadline.
	_ = conn.(*net.TCPConn).CloseWrite()
	_, _ = conn.Read(make([]byte, 1))
}

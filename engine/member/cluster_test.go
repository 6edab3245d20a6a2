package member

import (
	"reflect"
	"testing"
)

func TestParseClusterNodes(t *testing.T) {
	text := `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 [10923-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 slave 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected
aaaabbbbccccddddeeeeffff0000111122223333 127.0.0.1:30009@31009 handshake - 0 0 0 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 7 [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f] [77-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
`
	v, err := ParseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	want := ClusterView{ID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", Primary: true, Slots: [][2]int{{0, 5460}, {7, 7}},
		Migrating: map[int]string{93: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f"},
		Importing: map[int]string{77: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1"},
		Known: map[string]string{"07c37dfeb235213a872192d90877d0cd55635b91": "127.0.0.1:30004", "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1": "127.0.0.1:30002",
			"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f": "127.0.0.1:30003", "6ec23923021cf3ffec47632106199cb7f496ce01": "127.0.0.1:30005"},
		Serving: map[string]bool{"07c37dfeb235213a872192d90877d0cd55635b91": false, "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1": true,
			"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f": true, "6ec23923021cf3ffec47632106199cb7f496ce01": false}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("got  %+v\nwant %+v", v, want)
	}
	if _, err := ParseClusterNodes("e7d1 127.0.0.1:30001@31001 master - 0 0 1 connected 0-5460\n"); err == nil {
		t.Error("a text with no myself line was accepted")
	}
	if _, err := ParseClusterNodes("e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-x\n"); err == nil {
		t.Error("a bad slot range was accepted")
	}
}

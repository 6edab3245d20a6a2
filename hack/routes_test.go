package hack

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestClusterRefusesForeignRoutes runs cluster.sh check-routes in a network namespace of its own
// (unshare -n, as root): with no route in the cluster's ranges, or only the ones the script makes
// (through its veth), it passes; a route someone else made inside the pod range, or one covering
// it, makes it stop and name the route, before anything is changed.
func TestClusterRefusesForeignRoutes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (CI runs as root)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	cases := []struct {
		name, setup string
		refused     bool
	}{
		{"no route", "true", false},
		{"the script's own", "ip link add cachenet0 type veth peer name cachenet0p && ip link set cachenet0 up && ip addr add 198.19.63.1/30 dev cachenet0 && ip route add 198.18.0.0/18 via 198.19.63.2", false},
		{"another's inside the pod range", "ip link add vpn0 type veth peer name vpn0p && ip link set vpn0 up && ip route add 198.18.5.0/24 dev vpn0", true},
		{"another's covering it", "ip link add lab0 type veth peer name lab0p && ip link set lab0 up && ip route add 198.18.0.0/15 dev lab0", true},
		{"another's in the service range", "ip link add vpn0 type veth peer name vpn0p && ip link set vpn0 up && ip route add 198.19.0.0/24 dev vpn0", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("unshare", "-n", "bash", "-c", "ip link set lo up && "+tc.setup+" && exec bash ../localcluster/cluster.sh check-routes")
			cmd.Env = append(os.Environ(), "CLUSTER_NAME=routes-test", "CLUSTER_NET_INDEX=0", "CLUSTER_DIR="+t.TempDir())
			out, err := cmd.CombinedOutput()
			refused := err != nil
			if refused != tc.refused || (refused && !strings.Contains(string(out), "refusing to route")) {
				t.Errorf("refused %v (%v), want %v; output:\n%s", refused, err, tc.refused, out)
			}
		})
	}
}

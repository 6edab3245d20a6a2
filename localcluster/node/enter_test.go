package main

import (
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestEnterableOnlyWhatNsenterCanReproduce(t *testing.T) {
	user := func(uid, gid uint32, groups ...uint32) *specs.Process {
		return &specs.Process{User: specs.User{UID: uid, GID: gid, AdditionalGids: groups}, Capabilities: &specs.LinuxCapabilities{}}
	}
	withCaps := user(999, 999)
	withCaps.Capabilities.Bounding = []string{"CAP_NET_BIND_SERVICE"}
	for _, tc := range []struct {
		name string
		p    *specs.Process
		want bool
	}{
		{"non-root, no capability", user(999, 999), true},
		{"its own group as a supplementary one (fsGroup)", user(999, 999, 999), true},
		{"no process", nil, false},
		{"root", user(0, 0), false},
		{"another supplementary group", user(999, 999, 1000), false},
		{"a capability", withCaps, false},
	} {
		if got := enterable(tc.p) != nil; got != tc.want {
			t.Errorf("%s: enterable %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestEnterCommand(t *testing.T) {
	p := &specs.Process{User: specs.User{UID: 999, GID: 998}, Cwd: "/data"}
	got := enterCommand("/usr/bin/nsenter", 42, p, []string{"sh", "-c", "true"})
	want := []string{"/usr/bin/nsenter", "--target", "42", "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wdns=/data",
		"--setgid", "998", "--setuid", "999", "--", "sh", "-c", "true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("enterCommand:\n got %q\nwant %q", got, want)
	}
}

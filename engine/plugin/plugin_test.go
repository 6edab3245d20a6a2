package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseTakesFlagsAnywhere(t *testing.T) {
	o, pos, err := parse([]string{"status", "sessions", "-n", "shop", "--wait=false", "--timeout", "10s", "--to=sessions-2"})
	if err != nil || strings.Join(pos, " ") != "status sessions" || o.namespace != "shop" || o.wait || o.timeout != 10*time.Second || o.to != "sessions-2" {
		t.Errorf("parse: %+v %v %v", o, pos, err)
	}
	if _, _, err := parse([]string{"status", "--no-such-flag"}); err == nil {
		t.Error("an unknown flag parsed")
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"frobnicate", "x"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
	if code := Main([]string{"status"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "takes the cache's name") {
		t.Errorf("no name: exit %d, %q", code, errOut.String())
	}
	if !IsPlugin("/usr/local/bin/kubectl-mc") || !IsPlugin("kubectl-managedcache") || IsPlugin("/bin/cache-operator") {
		t.Error("IsPlugin")
	}
}

func TestRedact(t *testing.T) {
	in := "requirepass s3cret-value\nmasterauth: other-secret\nPASSWORD=abc\nuser app on #" + strings.Repeat("ab", 32) + " >plainpw ~* +@all\nrole:master\nused_memory:1024\n"
	got := string(redact([]byte(in)))
	for _, secret := range []string{"s3cret-value", "other-secret", "abc", strings.Repeat("ab", 32), "plainpw"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q survives redaction:\n%s", secret, got)
		}
	}
	for _, kept := range []string{"role:master", "used_memory:1024", "user app on", "~* +@all"} {
		if !strings.Contains(got, kept) {
			t.Errorf("%q redacted:\n%s", kept, got)
		}
	}
}

func TestOwnsName(t *testing.T) {
	for obj, want := range map[string]bool{"s": true, "s-0": true, "s-12": true, "s-rw": false, "s-2-x": false, "sx-0": false, "s-": false} {
		if got := ownsName("s", obj); got != want {
			t.Errorf("ownsName(s, %q) = %v", obj, got)
		}
	}
	if bytesIEC(0) != "0 B" || bytesIEC(1536) != "1.5 KiB" || bytesIEC(3<<30) != "3.0 GiB" {
		t.Errorf("bytesIEC: %s %s %s", bytesIEC(0), bytesIEC(1536), bytesIEC(3<<30))
	}
}

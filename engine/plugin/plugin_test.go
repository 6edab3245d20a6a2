package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
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

// A Secret applied with kubectl keeps the applied object, data or stringData, on one JSON line in
// an annotation that the line redaction does not match: the report keeps of a Secret its key
// names and only the operator's own annotation values, and of any other object the size of that
// annotation, not its value.
func TestReportLeavesOutAppliedSecrets(t *testing.T) {
	const pw, pw64 = "applied-S3cret-pw", "YXBwbGllZC1TM2NyZXQtcHc="
	applied := `{"apiVersion":"v1","kind":"Secret","metadata":{"annotations":{},"name":"c-auth","namespace":"shop"},"stringData":{"password":"` + pw + `"},"data":{"internal":"` + pw64 + `"}}` + "\n"
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-auth", Namespace: "shop", Annotations: map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": applied,
		"note":                                "password=" + pw,
		"cache.example.com/password-revision": "2",
	}}, Data: map[string][]byte{"password": []byte(pw), "internal": []byte(pw)}}
	b, err := yaml.Marshal(secretSummary(s))
	if err != nil {
		t.Fatal(err)
	}
	got := string(redact(b))
	for _, secret := range []string{pw, pw64} {
		if strings.Contains(got, secret) {
			t.Errorf("the Secret's summary holds %q:\n%s", secret, got)
		}
	}
	for _, kept := range []string{"cache.example.com/password-revision: \"2\"", "- internal", "- password", "name: c-auth"} {
		if !strings.Contains(got, kept) {
			t.Errorf("the Secret's summary lacks %q:\n%s", kept, got)
		}
	}

	// Any object: kubectl's annotation goes, in a list's items too, and so do managed fields.
	obj := map[string]interface{}{"kind": "List", "items": []interface{}{map[string]interface{}{"metadata": map[string]interface{}{
		"name": "c", "annotations": map[string]interface{}{"kubectl.kubernetes.io/last-applied-configuration": applied},
		"managedFields": []interface{}{map[string]interface{}{"manager": "kubectl"}}}}}}
	b, err = yaml.Marshal(scrubbed(obj))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); strings.Contains(got, pw) || strings.Contains(got, pw64) || strings.Contains(got, "managedFields") || !strings.Contains(got, "<redacted: ") {
		t.Errorf("a list's item after scrubbing:\n%s", got)
	}
	if !strings.Contains(obj["items"].([]interface{})[0].(map[string]interface{})["metadata"].(map[string]interface{})["annotations"].(map[string]interface{})["kubectl.kubernetes.io/last-applied-configuration"].(string), pw) {
		t.Error("scrubbed changed the object it was given")
	}
}

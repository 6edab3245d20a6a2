package api

import (
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"example.com/cache-operator/crd"
)

// schedulePattern is the regular expression of the CRD's rule on v2 spec.backup.schedule.
func schedulePattern(t *testing.T) *regexp.Regexp {
	t.Helper()
	var def map[string]interface{}
	if err := yaml.Unmarshal(crd.ManagedCaches, &def); err != nil {
		t.Fatal(err)
	}
	versions, _ := def["spec"].(map[string]interface{})["versions"].([]interface{})
	for _, v := range versions {
		vm := v.(map[string]interface{})
		if vm["name"] != "v2" {
			continue
		}
		node := vm["schema"].(map[string]interface{})["openAPIV3Schema"]
		for _, p := range []string{"spec", "backup", "schedule"} {
			node = node.(map[string]interface{})["properties"].(map[string]interface{})[p]
		}
		rule := node.(map[string]interface{})["x-kubernetes-validations"].([]interface{})[0].(map[string]interface{})["rule"].(string)
		m := regexp.MustCompile(`^self\.matches\(r"(.*)"\)$`).FindStringSubmatch(rule)
		if m == nil {
			t.Fatalf("the schedule's rule is not self.matches(r\"...\"): %s", rule)
		}
		return regexp.MustCompile(m[1])
	}
	t.Fatal("no v2 schema")
	return nil
}

// The CRD's rule refuses at kubectl apply, without the operator, what the cron parser refuses:
// every schedule it accepts parses (a reversed range a-b with b < a aside), on a table and on
// random ones.
func TestSchedulePatternAgreesWithTheParser(t *testing.T) {
	re := schedulePattern(t)
	for _, s := range []string{"0 3 * * *", "*/15 * * * *", "0 */6 * * *", "@every 6h", "@every 90m", "@daily", "@hourly",
		"0 0 1,15 * MON-FRI", "5 4 * * sun", "0 0 * JAN,JUL ?", "30 2 1-7 * 1"} {
		if !re.MatchString(s) {
			t.Errorf("the pattern refuses %q", s)
		}
		if _, err := ParseSchedule(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"61 * * * *", "* 24 * * *", "0 0 32 * *", "0 0 0 * *", "0 0 * 13 *", "0 0 * * 7", "1-70 * * * *",
		"every day", "* * *", "@every", "0 3 * * * *"} {
		if re.MatchString(s) {
			t.Errorf("the pattern accepts %q", s)
		}
	}
	tokens := []string{"*", "0", "5", "7", "12", "23", "24", "31", "32", "59", "60", "1-5", "5-1", "*/2", "1-30/5", "1,2", "MON", "JAN", "FOO", "?"}
	rng := rand.New(rand.NewSource(1))
	accepted := 0
	for i := 0; i < 20000; i++ {
		f := make([]string, 5)
		for j := range f {
			f[j] = tokens[rng.Intn(len(tokens))]
		}
		s := strings.Join(f, " ")
		if !re.MatchString(s) {
			continue
		}
		accepted++
		if _, err := ParseSchedule(s); err != nil && !strings.Contains(s, "5-1") {
			t.Errorf("the pattern accepts %q, which does not parse: %v", s, err)
		}
	}
	t.Log(fmt.Sprintf("%d of 20000 random schedules accepted by the pattern, each parsing (a reversed range aside, which the operator reports as InvalidSpec)", accepted))
}

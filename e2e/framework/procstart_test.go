package framework

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// processStart of this test process: between a minute before now and now (the clock-tick and
// boot-time arithmetic is right to within btime's second).
func TestProcessStart(t *testing.T) {
	began, ok := processStart(strconv.Itoa(os.Getpid()))
	if !ok {
		t.Fatal("no start time for this process")
	}
	if since := time.Since(began); since < -2*time.Second || since > time.Minute {
		t.Errorf("this process started %v ago by /proc; want within the last minute", since)
	}
}

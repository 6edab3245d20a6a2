package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// logTail is the end of a container's log without the CRI prefixes: at most the last 80 lines and
// 2048 bytes, as the kubelet's FallbackToLogsOnError takes.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	var out strings.Builder
	for _, l := range lines {
		// "<time> <stream> <F|P> <text>"
		if parts := strings.SplitN(l, " ", 4); len(parts) == 4 {
			out.WriteString(parts[3])
			if parts[2] == "F" {
				out.WriteString("\n")
			}
		}
	}
	msg := strings.TrimRight(out.String(), "\n")
	if len(msg) > 2048 {
		msg = msg[len(msg)-2048:]
	}
	return msg
}

// logWriter writes container output as the kubelet's CRI log format: "<RFC3339Nano> <stream> F <line>".
type logWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (w *logWriter) copyFrom(rd io.ReadCloser, stream string) {
	defer rd.Close()
	br := bufio.NewReaderSize(rd, 64*1024)
	for {
		line, err := br.ReadString('\n')
		if len(line) > 0 {
			tag := "F"
			if !strings.HasSuffix(line, "\n") {
				tag = "P"
				line += "\n"
			}
			w.mu.Lock()
			fmt.Fprintf(w.f, "%s %s %s %s", time.Now().UTC().Format(time.RFC3339Nano), stream, tag, line)
			w.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

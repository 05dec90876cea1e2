// Command fluent-go-send sends COUNT numbered events with github.com/fluent/fluent-logger-golang
// (forward protocol, Message mode, synchronous).
//
//	fluent-go-send --port P --tag T --count N --run R [--ack] [--subsecond]
//	               [--host H] [--timeout-ms MS] [--max-retry N]
//
// It exits 0 only if every Post succeeded (with --ack: only once each ack arrived and matched);
// otherwise it prints the client's own error on stderr and exits 1. The last stdout line is a JSON
// summary.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/fluent/fluent-logger-golang/fluent"
)

func main() {
	host := flag.String("host", "127.0.0.1", "server address")
	port := flag.Int("port", 0, "server port (required)")
	tag := flag.String("tag", "", "tag (required)")
	count := flag.Int("count", -1, "number of events (required)")
	run := flag.String("run", "", "run id written into every record (required)")
	ack := flag.Bool("ack", false, "RequestAck: send a chunk id and wait for the server's ack")
	subsecond := flag.Bool("subsecond", false, "SubSecondPrecision: send EventTime instead of integer seconds")
	timeoutMs := flag.Int("timeout-ms", 5000, "connect, write and ack-read timeout")
	// The library retries a failed write (and a missing or wrong ack) by reconnecting and sending the
	// same message again, MaxRetry times with growing waits (default 13, about a minute). A test wants
	// the first failure: 1 means one attempt and no retry.
	maxRetry := flag.Int("max-retry", 1, "attempts per event (the library's MaxRetry)")
	flag.Parse()
	if *port == 0 || *tag == "" || *count < 0 || *run == "" {
		fmt.Fprintln(os.Stderr, "fluent-go-send: --port, --tag, --count and --run are required")
		os.Exit(2)
	}

	timeout := time.Duration(*timeoutMs) * time.Millisecond
	logger, err := fluent.New(fluent.Config{
		FluentHost:         *host,
		FluentPort:         *port,
		Timeout:            timeout,
		WriteTimeout:       timeout,
		ReadTimeout:        timeout, // the library's default (0) waits for an ack forever
		MaxRetry:           *maxRetry,
		RetryWait:          100,
		RequestAck:         *ack,
		SubSecondPrecision: *subsecond,
	})
	if err != nil {
		fail("connect", err)
	}
	for i := 0; i < *count; i++ {
		record := map[string]interface{}{
			"n":       i,
			"message": fmt.Sprintf("event %d", i),
			"run":     *run,
			"nested": map[string]interface{}{
				"list": []interface{}{1, "two", 3.5, true, nil},
				"map":  map[string]interface{}{"k": "v"},
			},
		}
		if err := logger.Post(*tag, record); err != nil {
			fail(fmt.Sprintf("event %d", i), err)
		}
	}
	if err := logger.Close(); err != nil {
		fail("close", err)
	}

	summary, _ := json.Marshal(map[string]interface{}{
		"sent": *count, "client": "go-fluent-logger-golang", "version": libraryVersion(),
		"mode": "Message", "ack": *ack, "subsecond": *subsecond,
	})
	fmt.Println(string(summary))
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "fluent-go-send: %s: %v\n", what, err)
	os.Exit(1)
}

// libraryVersion reads the module version compiled in from go.mod, so the summary cannot go stale.
func libraryVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/fluent/fluent-logger-golang" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

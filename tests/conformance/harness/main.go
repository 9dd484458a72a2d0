// Command nri-harness plays the container runtime's side of NRI for conformance tests.
//
// It embeds the published runtime adaptation (github.com/containerd/nri/pkg/adaptation),
// listens on the socket given by -socket, and is driven by JSON-lines commands on stdin.
// Every command gets exactly one JSON-lines reply on stdout, in order; logs go to stderr.
// The same source builds against two NRI releases: the default build uses the module's
// go.mod (latest release), `-tags nri_v06 -modfile go.v06.mod` the containerd 1.7 era one.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
)

type options struct {
	socket              string
	workDir             string
	runtimeName         string
	runtimeVersion      string
	registrationTimeout time.Duration
	requestTimeout      time.Duration
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.socket, "socket", "", "unix socket path the runtime listens on (required)")
	flag.StringVar(&o.workDir, "workdir", "", "scratch dir for the (empty) plugin and config dirs; default: a new temp dir")
	flag.StringVar(&o.runtimeName, "runtime-name", "nri-harness", "runtime name sent in Configure")
	flag.StringVar(&o.runtimeVersion, "runtime-version", "v0.0.0-harness", "runtime version sent in Configure")
	flag.DurationVar(&o.registrationTimeout, "registration-timeout", 0, "plugin registration timeout (0: library default)")
	flag.DurationVar(&o.requestTimeout, "request-timeout", 0, "plugin request timeout (0: library default)")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	if o.socket == "" {
		fmt.Fprintln(os.Stderr, "nri-harness: -socket is required")
		os.Exit(2)
	}
	if o.registrationTimeout > 0 {
		nri.SetPluginRegistrationTimeout(o.registrationTimeout)
	}
	if o.requestTimeout > 0 {
		nri.SetPluginRequestTimeout(o.requestTimeout)
	}
	if o.workDir == "" {
		dir, err := os.MkdirTemp("", "nri-harness-")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(dir)
		o.workDir = dir
	}

	h := newHarness(o)
	if err := h.start(); err != nil {
		fatal(err)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	if err := out.Encode(h.readyReply()); err != nil {
		fatal(err)
	}
	serve(h, out)
	h.stop()
}

// serve runs commands one at a time until "quit" or end of input.
func serve(h *harness, out *json.Encoder) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		reply, quit := h.handleLine(line)
		if err := out.Encode(reply); err != nil {
			fatal(err)
		}
		if quit {
			return
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "nri-harness: reading commands: %v\n", err)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "nri-harness: %v\n", err)
	os.Exit(1)
}

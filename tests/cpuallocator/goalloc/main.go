// Command goalloc answers CPU allocation questions with nri-plugins' own pkg/cpuallocator,
// on a sysfs tree given as an argument, so tests can compare nri-resmgr's allocator with it.
//
// Input (stdin): one JSON object per line, {"from": "0-15", "count": 3, "prio": "normal"}.
// Output (stdout): one JSON object per line, {"cpus": "0-2"} or {"error": "..."}.
// The first output line lists the CPU priorities discovered: {"high": ..., "normal": ...}.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/containers/nri-plugins/pkg/cpuallocator"
	"github.com/containers/nri-plugins/pkg/sysfs"
	"github.com/containers/nri-plugins/pkg/utils/cpuset"
)

type request struct {
	From  string `json:"from"`
	Count int    `json:"count"`
	Prio  string `json:"prio"`
}

var prios = map[string]cpuallocator.CPUPriority{
	"high":   cpuallocator.PriorityHigh,
	"normal": cpuallocator.PriorityNormal,
	"low":    cpuallocator.PriorityLow,
	"none":   cpuallocator.PriorityNone,
	"":       cpuallocator.PriorityNone,
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: goalloc <sysfs-root>")
		os.Exit(2)
	}
	sys, err := sysfs.DiscoverSystemAt(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sysfs discovery failed: %v\n", err)
		os.Exit(1)
	}
	alloc := cpuallocator.NewCPUAllocator(sys)
	out := json.NewEncoder(os.Stdout)
	discovered := map[string]string{}
	for p, cpus := range alloc.GetCPUPriorities() {
		discovered[p.String()] = cpus.String()
	}
	_ = out.Encode(discovered)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		from, err := cpuset.Parse(r.From)
		if err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		prio, ok := prios[r.Prio]
		if !ok {
			_ = out.Encode(map[string]string{"error": "unknown priority " + r.Prio})
			continue
		}
		cpus, err := alloc.AllocateCpus(&from, r.Count, prio.Option())
		if err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		_ = out.Encode(map[string]string{"cpus": cpus.String()})
	}
}

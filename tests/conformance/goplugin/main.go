// Command nri-goplugin is a reference NRI plugin built on the published Go stub. It proves
// the conformance harness works before our own plugin is put through it: it pins every new
// container to -cpus and, once a container has started, asks the runtime (unsolicited) to
// move it to -update-cpus. It reconnects whenever the runtime drops the connection.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	stub       stub.Stub
	cpus       string
	updateCPUs string
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	adjust.SetLinuxCPUSetCPUs(p.cpus)
	return adjust, nil, nil
}

func (p *plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	if p.updateCPUs == "" {
		return nil
	}
	update := &api.ContainerUpdate{ContainerId: ctr.GetId()}
	update.SetLinuxCPUSetCPUs(p.updateCPUs)
	// Called from a goroutine: runtimes may hold their lock while relaying this event.
	go func(s stub.Stub) {
		if _, err := s.UpdateContainers([]*api.ContainerUpdate{update}); err != nil {
			fmt.Fprintf(os.Stderr, "nri-goplugin: UpdateContainers: %v\n", err)
		}
	}(p.stub)
	return nil
}

func main() {
	socket := flag.String("socket", api.DefaultSocketPath, "runtime NRI socket")
	name := flag.String("name", "goplugin", "plugin name")
	idx := flag.String("idx", "10", "plugin index")
	cpus := flag.String("cpus", "0-1", "cpuset.cpus set in every CreateContainer adjustment")
	updateCPUs := flag.String("update-cpus", "0", "cpuset.cpus sent by UpdateContainers after PostStartContainer (empty: none)")
	flag.Parse()

	for {
		p := &plugin{cpus: *cpus, updateCPUs: *updateCPUs}
		s, err := stub.New(p, stub.WithSocketPath(*socket), stub.WithPluginName(*name),
			stub.WithPluginIdx(*idx))
		if err != nil {
			fmt.Fprintf(os.Stderr, "nri-goplugin: %v\n", err)
			os.Exit(1)
		}
		p.stub = s
		err = s.Run(context.Background())
		fmt.Fprintf(os.Stderr, "nri-goplugin: connection ended (%v), reconnecting\n", err)
		time.Sleep(100 * time.Millisecond)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// command is one line of input. Pods, containers and resources use the protobuf JSON
// mapping of the NRI API messages (snake_case or lowerCamelCase field names).
type command struct {
	ID                     json.RawMessage   `json:"id,omitempty"`
	Op                     string            `json:"op"`
	Pod                    json.RawMessage   `json:"pod,omitempty"`
	Container              json.RawMessage   `json:"container,omitempty"`
	Pods                   []json.RawMessage `json:"pods,omitempty"`
	Containers             []json.RawMessage `json:"containers,omitempty"`
	LinuxResources         json.RawMessage   `json:"linux_resources,omitempty"`
	OverheadLinuxResources json.RawMessage   `json:"overhead_linux_resources,omitempty"`
	Count                  int               `json:"count,omitempty"`
	TimeoutMs              int               `json:"timeout_ms,omitempty"`
	ContainerIDs           []string          `json:"container_ids,omitempty"`
}

type reply map[string]any

// relayOps are the commands that forward a lifecycle event to the plugins.
var relayOps = map[string]bool{
	"run-pod": true, "update-pod": true, "post-update-pod": true, "stop-pod": true,
	"remove-pod": true, "create-container": true, "post-create-container": true,
	"start-container": true, "post-start-container": true, "update-container": true,
	"post-update-container": true, "stop-container": true, "remove-container": true,
}

const defaultTimeout = 10 * time.Second

var jsonOut = protojson.MarshalOptions{UseProtoNames: true}

func (h *harness) readyReply() reply {
	return reply{"op": "ready", "ok": true, "socket": h.opts.socket, "api": apiRelease,
		"nri_version": nriModuleVersion()}
}

// handleLine runs one command and returns its reply and whether the harness should exit.
func (h *harness) handleLine(line []byte) (reply, bool) {
	var cmd command
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cmd); err != nil {
		return reply{"op": "", "ok": false, "error": fmt.Sprintf("bad command %q: %v", line, err)}, false
	}
	rep, err := h.dispatch(&cmd)
	if rep == nil {
		rep = reply{}
	}
	rep["op"], rep["ok"] = cmd.Op, err == nil
	if err != nil {
		rep["error"] = err.Error()
	}
	if len(cmd.ID) > 0 {
		rep["id"] = cmd.ID
	}
	h.mu.Lock()
	rep["generation"] = h.generation
	h.mu.Unlock()
	return rep, cmd.Op == "quit"
}

func (c *command) timeout() time.Duration {
	if c.TimeoutMs > 0 {
		return time.Duration(c.TimeoutMs) * time.Millisecond
	}
	return defaultTimeout
}

func (h *harness) dispatch(cmd *command) (reply, error) {
	switch cmd.Op {
	case "info":
		return h.readyReply(), nil
	case "plugins":
		return reply{"plugins": h.plugins()}, nil
	case "wait-plugin":
		return h.waitPlugin(cmd)
	case "sync-state":
		return h.setSyncState(cmd)
	case "syncs":
		return h.takeSyncs(), nil
	case "updates":
		return h.takeUpdates(cmd)
	case "fail-updates":
		return h.setFailingUpdates(cmd)
	case "restart":
		closed, err := h.restart()
		return reply{"closed_connections": closed}, err
	case "quit":
		h.stop()
		return nil, nil
	}
	if !relayOps[cmd.Op] {
		return nil, fmt.Errorf("unknown op %q", cmd.Op)
	}
	if h.r == nil {
		return nil, fmt.Errorf("runtime is not running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmd.timeout())
	defer cancel()
	return h.relay(ctx, cmd)
}

// relay forwards one pod or container lifecycle event to the plugins, timing the call.
func (h *harness) relay(ctx context.Context, cmd *command) (reply, error) {
	pod, err := decodeOptional(cmd.Pod, &api.PodSandbox{})
	if err != nil {
		return nil, fmt.Errorf("field pod: %w", err)
	}
	ctr, err := decodeOptional(cmd.Container, &api.Container{})
	if err != nil {
		return nil, fmt.Errorf("field container: %w", err)
	}
	res, err := decodeOptional(cmd.LinuxResources, &api.LinuxResources{})
	if err != nil {
		return nil, fmt.Errorf("field linux_resources: %w", err)
	}
	overhead, err := decodeOptional(cmd.OverheadLinuxResources, &api.LinuxResources{})
	if err != nil {
		return nil, fmt.Errorf("field overhead_linux_resources: %w", err)
	}

	start := time.Now()
	rep, err := h.relayEvent(ctx, cmd.Op, pod, ctr, res, overhead)
	ns := time.Since(start).Nanoseconds()
	if rep == nil {
		rep = reply{}
	}
	rep["ns"] = ns
	return rep, err
}

func (h *harness) relayEvent(ctx context.Context, op string, pod *api.PodSandbox, ctr *api.Container,
	res, overhead *api.LinuxResources) (reply, error) {
	switch op {
	case "create-container":
		rsp, err := h.r.CreateContainer(ctx, &nri.CreateContainerRequest{Pod: pod, Container: ctr})
		if err != nil {
			return nil, err
		}
		return reply{"adjust": protoJSON(rsp.GetAdjust()), "update": protoList(rsp.GetUpdate()),
			"evict": protoList(rsp.GetEvict())}, nil
	case "update-container":
		rsp, err := h.r.UpdateContainer(ctx, &nri.UpdateContainerRequest{Pod: pod, Container: ctr,
			LinuxResources: res})
		if err != nil {
			return nil, err
		}
		return reply{"update": protoList(rsp.GetUpdate()), "evict": protoList(rsp.GetEvict())}, nil
	case "stop-container":
		rsp, err := h.r.StopContainer(ctx, &nri.StopContainerRequest{Pod: pod, Container: ctr})
		if err != nil {
			return nil, err
		}
		return reply{"update": protoList(rsp.GetUpdate())}, nil
	case "update-pod":
		return relayUpdatePod(ctx, h.r, pod, res, overhead)
	case "run-pod", "stop-pod", "remove-pod", "post-update-pod":
		return nil, relayPodEvent(ctx, h.r, op, pod)
	case "post-create-container", "start-container", "post-start-container",
		"post-update-container", "remove-container":
		return nil, relayContainerEvent(ctx, h.r, op, pod, ctr)
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

func (h *harness) plugins() []pluginInfo {
	if h.r == nil {
		return []pluginInfo{}
	}
	return listPlugins(h.r)
}

// waitPlugin waits until at least `count` (default 1) plugins are registered, configured,
// synchronized and on the adaptation's invocation list, then reports them and the syncs.
func (h *harness) waitPlugin(cmd *command) (reply, error) {
	want := max(cmd.Count, 1)
	ok := h.waitFor(cmd.timeout(), func() bool { return len(h.plugins()) >= want })
	rep := h.takeSyncs()
	rep["plugins"] = h.plugins()
	if !ok {
		return rep, fmt.Errorf("timed out after %v waiting for %d plugin(s)", cmd.timeout(), want)
	}
	return rep, nil
}

func (h *harness) setSyncState(cmd *command) (reply, error) {
	pods := make([]*api.PodSandbox, 0, len(cmd.Pods))
	for i, raw := range cmd.Pods {
		pod := &api.PodSandbox{}
		if err := protojson.Unmarshal(raw, pod); err != nil {
			return nil, fmt.Errorf("pods[%d]: %w", i, err)
		}
		pods = append(pods, pod)
	}
	ctrs := make([]*api.Container, 0, len(cmd.Containers))
	for i, raw := range cmd.Containers {
		ctr := &api.Container{}
		if err := protojson.Unmarshal(raw, ctr); err != nil {
			return nil, fmt.Errorf("containers[%d]: %w", i, err)
		}
		ctrs = append(ctrs, ctr)
	}
	h.mu.Lock()
	h.pods, h.containers = pods, ctrs
	h.mu.Unlock()
	return reply{"pods": len(pods), "containers": len(ctrs)}, nil
}

func (h *harness) takeSyncs() reply {
	h.mu.Lock()
	defer h.mu.Unlock()
	syncs := h.syncs
	h.syncs = nil
	if syncs == nil {
		syncs = []syncRecord{}
	}
	return reply{"syncs": syncs}
}

// takeUpdates returns and forgets the plugin-initiated updates, first waiting until at
// least `count` of them arrived (default 0: return at once).
func (h *harness) takeUpdates(cmd *command) (reply, error) {
	ok := h.waitFor(cmd.timeout(), func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.updates) >= cmd.Count
	})
	h.mu.Lock()
	updates := h.updates
	h.updates = nil
	h.mu.Unlock()
	if updates == nil {
		updates = []updateRecord{}
	}
	rep := reply{"updates": updates}
	if !ok {
		return rep, fmt.Errorf("timed out after %v waiting for %d UpdateContainers call(s)",
			cmd.timeout(), cmd.Count)
	}
	return rep, nil
}

func (h *harness) setFailingUpdates(cmd *command) (reply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failIDs = map[string]bool{}
	for _, id := range cmd.ContainerIDs {
		h.failIDs[id] = true
	}
	return reply{"container_ids": cmd.ContainerIDs}, nil
}

func decodeOptional[T proto.Message](raw json.RawMessage, msg T) (T, error) {
	var zero T
	if len(raw) == 0 || string(raw) == "null" {
		return zero, nil
	}
	if err := protojson.Unmarshal(raw, msg); err != nil {
		return zero, err
	}
	return msg, nil
}

// protoJSON encodes m; a nil message (also a typed nil pointer) becomes null, as the
// runtime uses nil entries to mean "nothing changed".
func protoJSON(m proto.Message) json.RawMessage {
	if m == nil || !m.ProtoReflect().IsValid() {
		return json.RawMessage("null")
	}
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return json.RawMessage(fmt.Sprintf("%q", "unencodable: "+err.Error()))
	}
	return b
}

func protoList[T proto.Message](msgs []T) []any {
	out := make([]any, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, protoJSON(m))
	}
	return out
}

func clonePods(in []*api.PodSandbox) []*api.PodSandbox {
	out := make([]*api.PodSandbox, len(in))
	for i, p := range in {
		out[i] = proto.Clone(p).(*api.PodSandbox)
	}
	return out
}

func cloneContainers(in []*api.Container) []*api.Container {
	out := make([]*api.Container, len(in))
	for i, c := range in {
		out[i] = proto.Clone(c).(*api.Container)
	}
	return out
}

// nriModuleVersion is the release of github.com/containerd/nri linked into this binary.
func nriModuleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/containerd/nri" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

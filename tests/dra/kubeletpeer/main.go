// Command kubelet-dra-peer is the kubelet side of DRA, built from kubelet's own packages
// (k8s.io/kubernetes pkg/kubelet/pluginmanager and pkg/kubelet/cm/dra) and wired as kubelet
// wires them: the plugin manager watches the registration directory and hands "DRAPlugin"
// sockets to the DRA manager's registration handler; the DRA manager prepares and unprepares
// the claims of a pod, which it reads from the API server.
//
// Protocol: one JSON command per stdin line, one JSON reply per command on stdout; logs on
// stderr. First line out: {"op":"ready"}.
//
//	{"op":"plugin","driver":D}                         -> {registered, endpoint, service}
//	{"op":"wait-plugin","driver":D,"present":B,"timeout_ms":N}  (same reply, once it holds)
//	{"op":"prepare","pod":<v1.Pod JSON>}               -> {cdi_devices: {container: [ids]}}
//	{"op":"unprepare","pod":<v1.Pod JSON>}
//	{"op":"quit"}
//
// Every reply has "op", "ok" and, when not ok, "error".
//
// Where kubelet's API differs between the Kubernetes versions the suite builds this at, the
// difference lives in a file of its own chosen by a build tag (tests/dra/kubeletbuild.py
// sets it per version): node_ctx.go (1.36 and later) and node_noctx.go (1.35).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

type command struct {
	Op        string          `json:"op"`
	Driver    string          `json:"driver,omitempty"`
	Present   *bool           `json:"present,omitempty"`
	TimeoutMs int             `json:"timeout_ms,omitempty"`
	Pod       json.RawMessage `json:"pod,omitempty"`
}

type reply map[string]any

// allReady says every pod source has been seen: the peer has no pod sources of its own.
type allReady struct{}

func (allReady) AddSource(string) {}
func (allReady) AllReady() bool   { return true }

type peer struct {
	manager *dra.Manager
	plugins *draplugin.DRAPluginManager

	mu   sync.Mutex
	pods map[types.UID]*v1.Pod // prepared and not yet unprepared: kubelet's active pods
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	nodeName := flag.String("node", "", "the node this kubelet runs on")
	registryDir := flag.String("registry-dir", "", "plugin registration directory to watch")
	stateDir := flag.String("state-dir", "", "DRA manager checkpoint directory (kept across restarts)")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := start(ctx, *kubeconfig, *nodeName, *registryDir, *stateDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra-peer: %v\n", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(reply{"op": "ready", "ok": true})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		rep, quit := p.handle(ctx, in.Bytes())
		_ = out.Encode(rep)
		if quit {
			return
		}
	}
}

func start(ctx context.Context, kubeconfig, nodeName, registryDir, stateDir string) (*peer, error) {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	manager, err := dra.NewManager(klog.FromContext(ctx), client, stateDir)
	if err != nil {
		return nil, fmt.Errorf("DRA manager: %w", err)
	}
	p := &peer{manager: manager, pods: map[types.UID]*v1.Pod{}}
	getNode := nodeGetter(ctx, client, nodeName)
	// As container_manager_linux.go: Start (which creates the plugin registration handler
	// and, in the background, wipes the node's ResourceSlices), then the handler is added
	// to the plugin manager (kubelet.go) and the plugin manager runs.
	if err := manager.Start(ctx, p.activePods, getNode, allReady{}); err != nil {
		return nil, fmt.Errorf("DRA manager start: %w", err)
	}
	handler, ok := manager.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if !ok {
		return nil, fmt.Errorf("DRA watcher handler is a %T", manager.GetWatcherHandler())
	}
	p.plugins = handler
	broadcaster := record.NewBroadcaster()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: nodeName})
	plugins := pluginmanager.NewPluginManager(registryDir, recorder)
	plugins.AddHandler(pluginwatcherapi.DRAPlugin, manager.GetWatcherHandler())
	go plugins.Run(ctx, allReady{}, ctx.Done())
	return p, nil
}

func (p *peer) activePods() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := make([]*v1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		pods = append(pods, pod)
	}
	return pods
}

func (p *peer) handle(ctx context.Context, line []byte) (reply, bool) {
	var cmd command
	if err := json.Unmarshal(line, &cmd); err != nil {
		return reply{"op": "", "ok": false, "error": fmt.Sprintf("bad command: %v", err)}, false
	}
	rep, err := p.dispatch(ctx, &cmd)
	if rep == nil {
		rep = reply{}
	}
	rep["op"], rep["ok"] = cmd.Op, err == nil
	if err != nil {
		rep["error"] = err.Error()
	}
	return rep, cmd.Op == "quit"
}

func (p *peer) dispatch(ctx context.Context, cmd *command) (reply, error) {
	switch cmd.Op {
	case "plugin":
		return p.plugin(cmd.Driver), nil
	case "wait-plugin":
		return p.waitPlugin(cmd)
	case "prepare":
		return p.prepare(ctx, cmd.Pod)
	case "unprepare":
		return p.unprepare(ctx, cmd.Pod)
	case "quit":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown op %q", cmd.Op)
}

// plugin reports what kubelet knows of a driver: whether it is registered, its endpoint and
// the DRA service version kubelet chose for it (unexported fields, read by reflection).
func (p *peer) plugin(driver string) reply {
	plugin, err := p.plugins.GetPlugin(driver)
	if err != nil {
		return reply{"registered": false}
	}
	fields := reflect.ValueOf(plugin).Elem()
	return reply{"registered": true, "endpoint": fields.FieldByName("endpoint").String(),
		"service": fields.FieldByName("chosenService").String()}
}

func (p *peer) waitPlugin(cmd *command) (reply, error) {
	want := cmd.Present == nil || *cmd.Present
	timeout := 20 * time.Second
	if cmd.TimeoutMs > 0 {
		timeout = time.Duration(cmd.TimeoutMs) * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	for {
		rep := p.plugin(cmd.Driver)
		if rep["registered"] == want {
			return rep, nil
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("driver %s registered=%v after %v", cmd.Driver, !want, timeout)
		}
		time.Sleep(20 * time.Millisecond) // the plugin manager has no event to wait on
	}
}

func decodePod(raw json.RawMessage) (*v1.Pod, error) {
	pod := &v1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		return nil, fmt.Errorf("field pod: %w", err)
	}
	return pod, nil
}

func (p *peer) prepare(ctx context.Context, raw json.RawMessage) (reply, error) {
	pod, err := decodePod(raw)
	if err != nil {
		return nil, err
	}
	if err := p.manager.PrepareResources(ctx, pod); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.pods[pod.UID] = pod
	p.mu.Unlock()
	devices := map[string][]string{}
	for i := range pod.Spec.Containers {
		ctr := &pod.Spec.Containers[i]
		info, err := p.manager.GetResources(pod, ctr)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", ctr.Name, err)
		}
		ids := []string{}
		for _, d := range info.CDIDevices {
			ids = append(ids, d.Name)
		}
		devices[ctr.Name] = ids
	}
	return reply{"cdi_devices": devices}, nil
}

func (p *peer) unprepare(ctx context.Context, raw json.RawMessage) (reply, error) {
	pod, err := decodePod(raw)
	if err != nil {
		return nil, err
	}
	if err := p.manager.UnprepareResources(ctx, pod); err != nil {
		return nil, err
	}
	p.mu.Lock()
	delete(p.pods, pod.UID)
	p.mu.Unlock()
	return nil, nil
}

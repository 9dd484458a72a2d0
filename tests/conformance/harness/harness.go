package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// syncRecord describes one Synchronize round the runtime ran for a connecting plugin.
type syncRecord struct {
	Pods       int    `json:"pods"`
	Containers int    `json:"containers"`
	Updates    []any  `json:"updates"`
	Error      string `json:"error,omitempty"`
	Ns         int64  `json:"ns"`
}

// updateRecord is one UpdateContainers call a plugin made on its own initiative.
type updateRecord struct {
	Updates []any    `json:"updates"`
	Failed  []string `json:"failed"`
}

// harness owns the runtime adaptation and what plugins told it outside command replies.
type harness struct {
	opts options
	r    *nri.Adaptation

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced whenever syncs or updates grow
	pods       []*api.PodSandbox
	containers []*api.Container
	syncs      []syncRecord
	updates    []updateRecord
	failIDs    map[string]bool
	generation int  // counts restarts, so replies show which runtime instance answered
	starting   bool // Start() syncs pre-installed plugins (none here); not worth reporting
}

func newHarness(o options) *harness {
	return &harness{opts: o, changed: make(chan struct{}), failIDs: map[string]bool{}}
}

func (h *harness) start() error {
	pluginDir := filepath.Join(h.opts.workDir, "plugins")
	confDir := filepath.Join(h.opts.workDir, "conf.d")
	if err := os.MkdirAll(confDir, 0o700); err != nil {
		return err
	}
	r, err := nri.New(h.opts.runtimeName, h.opts.runtimeVersion, h.synchronize, h.updateContainers,
		nri.WithSocketPath(h.opts.socket),
		nri.WithPluginPath(pluginDir),
		nri.WithPluginConfigPath(confDir),
	)
	if err != nil {
		return fmt.Errorf("creating runtime adaptation: %w", err)
	}
	h.setStarting(true)
	err = r.Start()
	h.setStarting(false)
	if err != nil {
		return fmt.Errorf("starting runtime adaptation: %w", err)
	}
	h.r = r
	return nil
}

// stop shuts the adaptation down and drops every plugin connection, as a dying runtime would;
// the adaptation alone leaves external plugin connections open.
func (h *harness) stop() int {
	if h.r == nil {
		return 0
	}
	conns := pluginConns(h.r)
	h.r.Stop()
	for _, c := range conns {
		_ = c.Close()
	}
	h.r = nil
	return len(conns)
}

func (h *harness) restart() (int, error) {
	closed := h.stop()
	h.mu.Lock()
	h.generation++
	h.mu.Unlock()
	return closed, h.start()
}

// synchronize is the adaptation's SyncFn: it hands the plugin the state set by "sync-state".
func (h *harness) synchronize(ctx context.Context, cb nri.SyncCB) error {
	h.mu.Lock()
	pods, ctrs, starting := clonePods(h.pods), cloneContainers(h.containers), h.starting
	h.mu.Unlock()

	start := time.Now()
	updates, err := cb(ctx, pods, ctrs)
	// Read the clock before turning the updates into JSON: that is the harness's own work.
	ns := time.Since(start).Nanoseconds()
	rec := syncRecord{Pods: len(pods), Containers: len(ctrs), Updates: protoList(updates), Ns: ns}
	if err != nil {
		rec.Error = err.Error()
	}
	if !starting {
		h.record(func() { h.syncs = append(h.syncs, rec) })
	}
	return err
}

func (h *harness) setStarting(starting bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starting = starting
}

// updateContainers is the adaptation's UpdateFn: it records plugin-initiated updates and
// reports the ones for containers marked by "fail-updates" as failed.
func (h *harness) updateContainers(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	rec := updateRecord{Updates: protoList(updates), Failed: []string{}}
	h.mu.Lock()
	for _, u := range updates {
		if h.failIDs[u.GetContainerId()] {
			failed = append(failed, u)
			rec.Failed = append(rec.Failed, u.GetContainerId())
		}
	}
	h.mu.Unlock()
	h.record(func() { h.updates = append(h.updates, rec) })
	return failed, nil
}

// record applies change under the lock and wakes anyone waiting for news.
func (h *harness) record(change func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	change()
	close(h.changed)
	h.changed = make(chan struct{})
}

// waitFor polls ready until it holds or the timeout passes. ready runs without h.mu held:
// the v0.6 adaptation calls UpdateFn under its own lock, so h.mu must never be held while
// taking the adaptation's lock.
func (h *harness) waitFor(timeout time.Duration, ready func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		changed := h.changed
		h.mu.Unlock()
		if ready() {
			return true
		}
		select {
		case <-changed:
		case <-time.After(5 * time.Millisecond): // plugin registration has no event of its own
		case <-deadline.C:
			return false
		}
	}
}

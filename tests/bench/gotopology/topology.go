// Package topology stands in for nri-plugins' nested module pkg/topology, which no module
// proxy serves (it is never tagged, and the proxy here refuses its pseudo-versions), so that
// the Go plugins can be built from their published module. Written for this project from
// the behaviour upstream documents; it is not upstream's code. What the plugins use of it:
// topology hints of a device or a mounted path, read from sysfs.
//
// A device's hint is found by walking up its sysfs directory from the device itself to
// /sys/devices, taking the first directory that names CPUs (cpulist, cpulistaffinity,
// local_cpulist, shared_cpu_list) or a NUMA node (numa_node, -1 meaning none). A NUMA node
// without CPUs is completed from the parent's hints, and failing that taken as a socket.
// RAID members (slaves/*) and VFIO groups add their own hints.
package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProviderKubelet names hints that come from kubelet's CRI requests.
const ProviderKubelet = "kubelet"

// Hint is what sysfs tells about where a device sits; Provider is the sysfs path it came from.
type Hint struct {
	Provider string
	CPUs     string
	NUMAs    string
	Sockets  string
}

// Hints are hints by provider.
type Hints map[string]Hint

// Logger takes debug messages.
type Logger interface {
	Debugf(format string, v ...interface{})
}

type quiet struct{}

func (quiet) Debugf(string, ...interface{}) {}

var (
	root   = ""
	logger Logger = quiet{}
)

// SetSysRoot makes every sysfs path relative to dir ("" or "/" for the host's own).
func SetSysRoot(dir string) {
	root = ""
	if dir == "" {
		return
	}
	abs, err := filepath.Abs(filepath.Clean(dir))
	if err != nil {
		panic(fmt.Errorf("cannot resolve sysfs root %q: %v", dir, err))
	}
	if abs != "/" {
		root = abs
	}
}

// SetLogger sets the debug logger and returns the previous one.
func SetLogger(l Logger) Logger {
	previous := logger
	logger = l
	return previous
}

// ResetLogger drops the logger set with SetLogger.
func ResetLogger() { logger = quiet{} }

func (h *Hint) String() string {
	var parts []string
	if h.CPUs != "" {
		parts = append(parts, "CPUs:"+h.CPUs)
	}
	if h.NUMAs != "" {
		parts = append(parts, "NUMAs:"+h.NUMAs)
	}
	if h.Sockets != "" {
		parts = append(parts, "sockets:"+h.Sockets)
	}
	return "<hints " + strings.Join(parts, ", ") + " (from " + h.Provider + ")>"
}

func (h *Hint) empty() bool { return h.CPUs == "" && h.NUMAs == "" && h.Sockets == "" }

// MergeTopologyHints adds to org the hints of providers it does not have yet.
func MergeTopologyHints(org, hints Hints) Hints {
	if org == nil {
		org = make(Hints)
	}
	for provider, h := range hints {
		if _, seen := org[provider]; !seen {
			org[provider] = h
		}
	}
	return org
}

// ResolvePartialHints gives NUMA-only hints the CPUs resolve returns for their nodes.
func (hints Hints) ResolvePartialHints(resolve func(NUMAs string) string) {
	for provider, h := range hints {
		if h.CPUs == "" && h.NUMAs != "" {
			h.CPUs = resolve(h.NUMAs)
			hints[provider] = h
		}
	}
}

var hintFiles = map[string]bool{ // file -> names CPUs (else a NUMA node)
	"cpulist": true, "cpulistaffinity": true, "local_cpulist": true, "shared_cpu_list": true,
	"numa_node": false,
}

func hintAt(dir string) (*Hint, error) {
	provider := dir
	if root != "" {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return nil, err
		}
		provider = filepath.Join("/", rel)
	}
	h := &Hint{Provider: provider}
	for file, cpus := range hintFiles {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		value := strings.TrimSpace(string(data))
		if cpus {
			h.CPUs = value
		} else if value != "-1" {
			h.NUMAs = value
		}
	}
	if h.NUMAs != "" && h.CPUs == "" {
		completeFromParent(h, filepath.Dir(dir))
	}
	return h, nil
}

// completeFromParent fills a NUMA-only hint from the parent's hints (firmware that gives a
// socket id as the NUMA node); with no CPUs found, the node is taken as a socket.
func completeFromParent(h *Hint, parent string) {
	if parentHints, err := NewTopologyHints(parent); err == nil {
		cpus, nodes := map[string]bool{}, map[string]bool{}
		for _, p := range parentHints {
			cpus[p.CPUs], nodes[p.NUMAs] = true, true
		}
		if joined := joinKeys(cpus); joined != "" {
			h.CPUs = joined
		}
		if joined := joinKeys(nodes); joined != "" {
			h.NUMAs = joined
		}
	}
	if h.CPUs == "" {
		h.Sockets, h.NUMAs = h.NUMAs, ""
	}
}

func joinKeys(m map[string]bool) string {
	var keys []string
	for k := range m {
		if k != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// NewTopologyHints returns the hints of the device at devPath (a sysfs path) and of the
// devices it is made of.
func NewTopologyHints(devPath string) (Hints, error) {
	hints := make(Hints)
	real, err := filepath.EvalSymlinks(filepath.Join(root, devPath))
	if err != nil {
		return nil, fmt.Errorf("no real path for %s: %w", devPath, err)
	}
	for dir := real; strings.HasPrefix(dir, root+"/sys/devices/"); dir = filepath.Dir(dir) {
		h, err := hintAt(dir)
		if err != nil {
			return nil, err
		}
		if !h.empty() {
			logger.Debugf("%s", h.String())
			hints[h.Provider] = *h
			break
		}
	}
	members, _ := filepath.Glob(filepath.Join(real, "slaves/*"))
	for _, dev := range append(members, vfioDevices(real)...) {
		more, err := NewTopologyHints(dev)
		if err != nil {
			return nil, err
		}
		hints = MergeTopologyHints(hints, more)
	}
	return hints, nil
}

// vfioDevices: the devices of a VFIO device's IOMMU group.
func vfioDevices(real string) []string {
	rel, err := filepath.Rel("/sys/devices/virtual/vfio", real)
	if err != nil || strings.HasPrefix(rel, "..") || strings.Contains(rel, "/") {
		return nil
	}
	group := filepath.Join(root, "/sys/kernel/iommu_groups", rel, "devices")
	entries, err := os.ReadDir(group)
	if err != nil {
		return nil
	}
	var devs []string
	for _, e := range entries {
		if dev, err := filepath.EvalSymlinks(filepath.Join(group, e.Name())); err == nil {
			devs = append(devs, dev)
		}
	}
	return devs
}

// FindGivenSysFsDevice returns the sysfs path of a device by type ("b"/"block",
// "c"/"char") and numbers.
func FindGivenSysFsDevice(devType string, major, minor int64) (string, error) {
	switch devType {
	case "b":
		devType = "block"
	case "c":
		devType = "char"
	case "block", "char":
	default:
		return "", fmt.Errorf("invalid device type %q", devType)
	}
	return sysfsDevice(devType, major, minor)
}

// FindSysFsDevice returns the sysfs path of the device behind a path: the device node
// itself, or the block device of the file system holding the file. A path that does not
// exist gives "" and no error; a virtual file system an error.
func FindSysFsDevice(path string) (string, error) {
	info, err := os.Stat(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	stat := info.Sys().(*syscall.Stat_t)
	devType, dev := "block", uint64(stat.Dev)
	if info.Mode()&os.ModeDevice != 0 {
		dev = uint64(stat.Rdev)
		if info.Mode()&os.ModeCharDevice != 0 {
			devType = "char"
		}
	}
	if unix.Major(dev) == 0 {
		return "", fmt.Errorf("%s is on a virtual device", path)
	}
	return sysfsDevice(devType, int64(unix.Major(dev)), int64(unix.Minor(dev)))
}

func sysfsDevice(devType string, major, minor int64) (string, error) {
	link := fmt.Sprintf("%s/sys/dev/%s/%d:%d", root, devType, major, minor)
	real, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("no sysfs device for %s %d:%d: %w", devType, major, minor, err)
	}
	return strings.TrimPrefix(real, root), nil
}

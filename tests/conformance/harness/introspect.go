package main

import (
	"io"
	"reflect"
	"unsafe"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// The adaptation has no public view of its plugin list, and Stop() leaves external plugin
// connections open. A test runtime needs both (to know a plugin finished registering and
// to emulate a runtime restart), so these helpers read the unexported fields that exist in
// every release the harness supports: Adaptation.plugins and plugin.{idx,base,events,mux}.

type pluginInfo struct {
	Name   string `json:"name"`
	Index  string `json:"index"`
	Events int64  `json:"events"`
	// EventNames spells Events out so test failures are readable.
	EventNames string `json:"event_names"`
}

func pluginValues(r *nri.Adaptation) []reflect.Value {
	r.Lock()
	defer r.Unlock()
	list := reflect.ValueOf(r).Elem().FieldByName("plugins")
	if !list.IsValid() {
		panic("nri adaptation has no plugins field; harness needs updating for this release")
	}
	out := make([]reflect.Value, list.Len())
	for i := range out {
		out[i] = list.Index(i).Elem()
	}
	return out
}

func listPlugins(r *nri.Adaptation) []pluginInfo {
	out := []pluginInfo{}
	for _, p := range pluginValues(r) {
		mask := api.EventMask(p.FieldByName("events").Int())
		out = append(out, pluginInfo{
			Name:       p.FieldByName("base").String(),
			Index:      p.FieldByName("idx").String(),
			Events:     int64(mask),
			EventNames: mask.PrettyString(),
		})
	}
	return out
}

func pluginConns(r *nri.Adaptation) []io.Closer {
	var out []io.Closer
	for _, p := range pluginValues(r) {
		field := p.FieldByName("mux")
		if !field.IsValid() || field.IsNil() {
			continue
		}
		mux := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().Interface()
		if c, ok := mux.(io.Closer); ok {
			out = append(out, c)
		}
	}
	return out
}

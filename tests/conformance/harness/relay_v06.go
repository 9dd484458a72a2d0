//go:build nri_v06

package main

import (
	"context"
	"fmt"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// apiRelease names the NRI generation this build emulates: containerd 1.7, where every
// event that carries no adjustment reaches plugins as StateChange.
const apiRelease = "v0.6"

var stateChangeEvents = map[string]api.Event{
	"run-pod":               nri.Event_RUN_POD_SANDBOX,
	"stop-pod":              nri.Event_STOP_POD_SANDBOX,
	"remove-pod":            nri.Event_REMOVE_POD_SANDBOX,
	"post-create-container": nri.Event_POST_CREATE_CONTAINER,
	"start-container":       nri.Event_START_CONTAINER,
	"post-start-container":  nri.Event_POST_START_CONTAINER,
	"post-update-container": nri.Event_POST_UPDATE_CONTAINER,
	"remove-container":      nri.Event_REMOVE_CONTAINER,
}

func relayStateChange(ctx context.Context, r *nri.Adaptation, op string, pod *api.PodSandbox,
	ctr *api.Container) error {
	event, ok := stateChangeEvents[op]
	if !ok {
		return fmt.Errorf("op %q does not exist in NRI %s", op, apiRelease)
	}
	return r.StateChange(ctx, &nri.StateChangeEvent{Event: event, Pod: pod, Container: ctr})
}

func relayPodEvent(ctx context.Context, r *nri.Adaptation, op string, pod *api.PodSandbox) error {
	return relayStateChange(ctx, r, op, pod, nil)
}

func relayContainerEvent(ctx context.Context, r *nri.Adaptation, op string, pod *api.PodSandbox,
	ctr *api.Container) error {
	return relayStateChange(ctx, r, op, pod, ctr)
}

func relayUpdatePod(context.Context, *nri.Adaptation, *api.PodSandbox, *api.LinuxResources,
	*api.LinuxResources) (reply, error) {
	return nil, fmt.Errorf("op \"update-pod\" does not exist in NRI %s", apiRelease)
}

//go:build !nri_v06

package main

import (
	"context"
	"fmt"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// apiRelease names the NRI generation this build emulates: dedicated RPCs for every event.
const apiRelease = "v0.12"

func relayPodEvent(ctx context.Context, r *nri.Adaptation, op string, pod *api.PodSandbox) error {
	switch op {
	case "run-pod":
		return r.RunPodSandbox(ctx, &nri.RunPodSandboxRequest{Pod: pod})
	case "post-update-pod":
		return r.PostUpdatePodSandbox(ctx, &nri.PostUpdatePodSandboxRequest{Pod: pod})
	case "stop-pod":
		return r.StopPodSandbox(ctx, &nri.StopPodSandboxRequest{Pod: pod})
	case "remove-pod":
		return r.RemovePodSandbox(ctx, &nri.RemovePodSandboxRequest{Pod: pod})
	}
	return fmt.Errorf("unknown pod event %q", op)
}

func relayContainerEvent(ctx context.Context, r *nri.Adaptation, op string, pod *api.PodSandbox,
	ctr *api.Container) error {
	switch op {
	case "post-create-container":
		return r.PostCreateContainer(ctx, &nri.PostCreateContainerRequest{Pod: pod, Container: ctr})
	case "start-container":
		return r.StartContainer(ctx, &nri.StartContainerRequest{Pod: pod, Container: ctr})
	case "post-start-container":
		return r.PostStartContainer(ctx, &nri.PostStartContainerRequest{Pod: pod, Container: ctr})
	case "post-update-container":
		return r.PostUpdateContainer(ctx, &nri.PostUpdateContainerRequest{Pod: pod, Container: ctr})
	case "remove-container":
		return r.RemoveContainer(ctx, &nri.RemoveContainerRequest{Pod: pod, Container: ctr})
	}
	return fmt.Errorf("unknown container event %q", op)
}

func relayUpdatePod(ctx context.Context, r *nri.Adaptation, pod *api.PodSandbox,
	res, overhead *api.LinuxResources) (reply, error) {
	_, err := r.UpdatePodSandbox(ctx, &nri.UpdatePodSandboxRequest{Pod: pod, LinuxResources: res,
		OverheadLinuxResources: overhead})
	return nil, err
}

//go:build !getnode_noctx

package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

// nodeGetter reads this kubelet's Node from the API server. From Kubernetes 1.36 on the DRA
// manager passes its own context to GetNodeFunc, so the call is cancelled with the caller.
func nodeGetter(_ context.Context, client kubernetes.Interface, name string) dra.GetNodeFunc {
	return func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
}

//go:build getnode_noctx

package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
)

// nodeGetter reads this kubelet's Node from the API server. Kubernetes 1.35's GetNodeFunc
// takes no context, so the call uses the peer's, which ends when the peer quits.
func nodeGetter(ctx context.Context, client kubernetes.Interface, name string) dra.GetNodeFunc {
	return func() (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
}

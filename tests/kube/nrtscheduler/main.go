// nrt-scheduler: kube-scheduler with scheduler-plugins' NodeResourceTopologyMatch registered,
// the test peer of tests/kube/test_nrt_scheduler.py. Only the registration is ours: the
// scheduler is k8s.io/kubernetes' cmd/kube-scheduler/app and the plugin is the published
// sigs.k8s.io/scheduler-plugins module, both from Go's module cache (tests/kube/nrtschedbuild.py).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// The plugins' argument types (NodeResourceTopologyMatchArgs) in the config scheme.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/noderesourcetopology"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(noderesourcetopology.Name, noderesourcetopology.New),
	)
	os.Exit(cli.Run(command))
}

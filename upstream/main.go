// Command upstream is one binary holding the pinned upstream Kubernetes components the
// simulated cluster runs on its "kubernetes" control plane (sim/k8s). It dispatches on the
// name it was invoked as (a symlink per component) or, failing that, on its first argument,
// so one link serves them all and `make k8s` builds a single executable.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	// The client auth plugins kubectl ships with.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kubectl":                 kubectl.NewDefaultKubectlCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "etcd" {
		os.Exit(runEtcd(args))
	}
	build, ok := commands[name]
	if !ok && len(args) > 0 {
		name, args = args[0], args[1:]
		if name == "etcd" {
			os.Exit(runEtcd(args))
		}
		build, ok = commands[name]
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: %s {etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl} [flags]\n", filepath.Base(os.Args[0]))
		os.Exit(2)
	}
	command := build()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

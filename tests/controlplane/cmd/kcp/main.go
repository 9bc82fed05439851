// Command kcp is a multi-call binary: one link of the shared Kubernetes code base
// instead of five keeps the cold build within CI's budget on a 2-core machine.
//
//	kcp etcd [flags]            embedded etcd server (go.etcd.io/etcd/server/v3)
//	kcp kube-apiserver [flags]  k8s.io/kubernetes/cmd/kube-apiserver
//	kcp kube-scheduler [flags]  the reference scheduler, for side-by-side benchmarks
//	kcp kube-controller-manager [flags]  the controllers (resourceclaim, replicaset, disruption, ...)
//	kcp kubectl [args]          kubectl at the same version
//	kcp version                 prints the pinned versions
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// Versions are pinned in go.mod; keep these strings in step with it (kopf_scheduler.cluster.controlplane
// reads go.mod itself, so these only serve `kcp version`).
const (
	kubernetesVersion = "v1.37.2"
	etcdVersion       = "v3.7.0"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "kcp" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: kcp etcd|kube-apiserver|kube-scheduler|kube-controller-manager|kubectl|version [args]")
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	// Each component parses os.Args itself, so present it as if it were called directly.
	os.Args = append([]string{name}, args...)
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kubectl":
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	case "version":
		fmt.Printf("kubernetes=%s etcd=%s\n", kubernetesVersion, etcdVersion)
	default:
		fmt.Fprintf(os.Stderr, "kcp: unknown component %q\n", name)
		os.Exit(2)
	}
}

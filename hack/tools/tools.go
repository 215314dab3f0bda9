//go:build tools

// Package tools pins the modules whose commands the test control plane is built
// from: kube-apiserver, kubectl and the node's kubelet, kube-controller-manager,
// kube-scheduler and kube-proxy from k8s.io/kubernetes, and etcd.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)

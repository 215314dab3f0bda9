//go:build tools

// Package tools pins the modules whose commands the test control plane is built
// from: kube-apiserver and kubectl from k8s.io/kubernetes, and etcd.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

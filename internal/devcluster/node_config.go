package devcluster

import "fmt"

// containerdConfig keeps containerd's root, state and socket in the node's
// directory, runs runc with cgroupfs (the kubelet's driver) and uses the
// locally built pause image, so nothing is ever pulled.
func containerdConfig(n *node) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
# The opt plugin would create /opt/containerd.
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # Without CAP_SYS_RESOURCE (as in many VMs) runc cannot lower the OOM
  # score adjustment the kubelet asks for and every pod fails to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.containerdSocket(), PauseImage, cniDir, n.path("cni", "net.d"))
}

// cniConfig is one bridge (portal0, gateway NodeIP) with host-local
// addresses from PodCIDR. No masquerading: pods talk to the node and to
// each other, never to the outside.
func cniConfig(n *node) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "portal-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[1]q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %[2]q,
        "ranges": [[{"subnet": %[3]q, "gateway": %[4]q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, bridgeName, n.path("cni", "ipam"), PodCIDR, NodeIP)
}

// kubeletConfig: cgroupfs on cgroup v1 without swap checks, the node's
// own DNS server (node_dns.go) as every pod's name server, webhook
// authentication and authorization (the API server presents a client
// certificate of the node's CA), every directory under the node's, and
// eviction thresholds low enough that a busy development disk does not
// evict the tests' pods.
func kubeletConfig(n *node) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]q
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
podCIDR: %[3]q
clusterDomain: %[4]q
clusterDNS: [%[1]q]
podLogsDir: %[5]q
volumePluginDir: %[6]q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[7]q
authorization:
  mode: Webhook
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, NodeIP, n.containerdSocket(), PodCIDR, clusterDomain, n.path("pod-logs"), n.path("volume-plugins"), n.path("pki", "ca.crt"))
}

// kubeProxyConfig: iptables mode, and no host setting it would change
// beyond its own chains (no conntrack sysctls, no route_localnet for
// localhost NodePorts).
func kubeProxyConfig(n *node, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]q
clusterCIDR: %[2]q
bindAddress: %[3]q
healthzBindAddress: ""
metricsBindAddress: ""
nodePortAddresses: ["%[3]s/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`, kubeconfig, PodCIDR, NodeIP)
}

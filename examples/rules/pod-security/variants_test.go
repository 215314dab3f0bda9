package podsecurity_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
)

// variantCount is how many pods TestVariants generates: every single
// mutation, every mutation under each context mutation, then random pairs and
// triples up to this many.
const variantCount = 4000

// mutation changes one security-relevant field of a pod.
type mutation struct {
	desc  string
	apply func(p *corev1.Pod)
}

// basePod is a pod the restricted level allows: the starting point of every
// variant. It has one container of each type so container mutations reach all
// three lists.
func basePod() *corev1.Pod {
	ctr := func(name string) corev1.Container {
		return corev1.Container{
			Name:  name,
			Image: "registry.k8s.io/pause",
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}
	}
	app := ctr("app")
	app.Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "variant", Namespace: "default", Labels: map[string]string{"app": "variant"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers:          []corev1.Container{app},
			InitContainers:      []corev1.Container{ctr("init")},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(ctr("debug"))}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}},
			}}},
		},
	}
}

func podSC(p *corev1.Pod) *corev1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

// targets are the containers a container mutation may change.
var targets = []struct {
	name string
	get  func(p *corev1.Pod) *corev1.Container
}{
	{"containers[0]", func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }},
	{"initContainers[0]", func(p *corev1.Pod) *corev1.Container { return &p.Spec.InitContainers[0] }},
	{"ephemeralContainers[0]", func(p *corev1.Pod) *corev1.Container {
		return (*corev1.Container)(&p.Spec.EphemeralContainers[0].EphemeralContainerCommon)
	}},
}

func containerSC(c *corev1.Container) *corev1.SecurityContext {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	return c.SecurityContext
}

// show prints a mutation value as JSON: pointers by what they point at.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

var (
	bools   = []*bool{nil, ptr.To(true), ptr.To(false)}
	uids    = []*int64{nil, ptr.To[int64](0), ptr.To[int64](1000)}
	seccomp = []*corev1.SeccompProfile{nil, {Type: corev1.SeccompProfileTypeRuntimeDefault},
		{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")},
		{Type: corev1.SeccompProfileTypeUnconfined}, {Type: ""}, {Type: "Bogus"}}
	appArmor = []*corev1.AppArmorProfile{nil, {Type: corev1.AppArmorProfileTypeRuntimeDefault},
		{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-apparmor")},
		{Type: corev1.AppArmorProfileTypeUnconfined}, {Type: ""}}
	seLinux = []*corev1.SELinuxOptions{nil, {}, {Type: "container_t"}, {Type: "container_init_t"}, {Type: "container_engine_t"},
		{Type: "spc_t"}, {User: "system_u"}, {Role: "system_r"}, {Level: "s0:c123,c456"}, {Type: "container_t", Role: "object_r"}}
	hostProcess = []*corev1.WindowsSecurityContextOptions{nil, {HostProcess: ptr.To(false)}, {HostProcess: ptr.To(true)},
		{RunAsUserName: ptr.To("ContainerUser")}}
	capabilities = []*corev1.Capabilities{nil, {}, {Drop: []corev1.Capability{"NET_RAW"}}, {Drop: []corev1.Capability{"all"}},
		{Drop: []corev1.Capability{"ALL"}}, {Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
		{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN"}}, {Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_RAW"}},
		{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"SYS_ADMIN", "NET_BIND_SERVICE"}}, {Add: []corev1.Capability{"KILL"}},
		{Drop: []corev1.Capability{"NET_RAW", "ALL"}, Add: []corev1.Capability{"CAP_SYS_ADMIN"}}}
	procMounts = []*corev1.ProcMountType{nil, ptr.To(corev1.DefaultProcMount), ptr.To(corev1.UnmaskedProcMount), ptr.To(corev1.ProcMountType(""))}
	sysctls    = [][]corev1.Sysctl{nil, {{Name: "net.ipv4.tcp_rmem", Value: "4096 87380 16777216"}}, {{Name: "kernel.msgmax", Value: "65536"}},
		{{Name: "kernel.shm_rmid_forced", Value: "1"}, {Name: "net.core.somaxconn", Value: "1024"}},
		{{Name: "net.ipv4.ip_local_reserved_ports", Value: "30000"}, {Name: "net.ipv4.tcp_keepalive_time", Value: "60"}}}
	annotations = []map[string]string{
		{"container.apparmor.security.beta.kubernetes.io/app": "runtime/default"},
		{"container.apparmor.security.beta.kubernetes.io/app": "localhost/k8s-apparmor"},
		{"container.apparmor.security.beta.kubernetes.io/app": "unconfined"},
		{"container.apparmor.security.beta.kubernetes.io/init": ""},
		{"container.apparmor.security.beta.kubernetes.io/ghost": "unconfined"},
		{"seccomp.security.alpha.kubernetes.io/pod": "unconfined"},
		{"container.seccomp.security.alpha.kubernetes.io/app": "unconfined"},
	}
	volumeSources = map[string]corev1.VolumeSource{
		"none":                  {},
		"hostPath":              {HostPath: &corev1.HostPathVolumeSource{Path: "/var/run"}},
		"emptyDir":              {EmptyDir: &corev1.EmptyDirVolumeSource{}},
		"secret":                {Secret: &corev1.SecretVolumeSource{SecretName: "s"}},
		"configMap":             {ConfigMap: &corev1.ConfigMapVolumeSource{}},
		"downwardAPI":           {DownwardAPI: &corev1.DownwardAPIVolumeSource{}},
		"projected":             {Projected: &corev1.ProjectedVolumeSource{}},
		"csi":                   {CSI: &corev1.CSIVolumeSource{Driver: "csi.example.com"}},
		"ephemeral":             {Ephemeral: &corev1.EphemeralVolumeSource{}},
		"image":                 {Image: &corev1.ImageVolumeSource{Reference: "registry.k8s.io/pause"}},
		"persistentVolumeClaim": {PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}},
		"nfs":                   {NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}},
		"gitRepo":               {GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/r.git"}},
		"iscsi":                 {ISCSI: &corev1.ISCSIVolumeSource{}},
		"glusterfs":             {Glusterfs: &corev1.GlusterfsVolumeSource{}},
		"rbd":                   {RBD: &corev1.RBDVolumeSource{}},
		"flexVolume":            {FlexVolume: &corev1.FlexVolumeSource{Driver: "x/y"}},
		"cinder":                {Cinder: &corev1.CinderVolumeSource{}},
		"cephfs":                {CephFS: &corev1.CephFSVolumeSource{}},
		"flocker":               {Flocker: &corev1.FlockerVolumeSource{}},
		"fc":                    {FC: &corev1.FCVolumeSource{}},
		"azureFile":             {AzureFile: &corev1.AzureFileVolumeSource{}},
		"azureDisk":             {AzureDisk: &corev1.AzureDiskVolumeSource{}},
		"vsphereVolume":         {VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{}},
		"quobyte":               {Quobyte: &corev1.QuobyteVolumeSource{}},
		"portworxVolume":        {PortworxVolume: &corev1.PortworxVolumeSource{}},
		"photonPersistentDisk":  {PhotonPersistentDisk: &corev1.PhotonPersistentDiskVolumeSource{}},
		"scaleIO":               {ScaleIO: &corev1.ScaleIOVolumeSource{}},
		"storageos":             {StorageOS: &corev1.StorageOSVolumeSource{}},
		"gcePersistentDisk":     {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{}},
		"awsElasticBlockStore":  {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{}},
	}
)

// makeWindows sets spec.os.name=windows and clears every field the API
// server rejects on a Windows pod (validateWindows in
// k8s.io/kubernetes/pkg/apis/core/validation), as a user writing a valid
// Windows pod would.
func makeWindows(p *corev1.Pod) {
	p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
	p.Spec.HostUsers, p.Spec.HostPID, p.Spec.HostIPC = nil, false, false
	if sc := p.Spec.SecurityContext; sc != nil {
		sc.AppArmorProfile, sc.SELinuxOptions, sc.SeccompProfile, sc.Sysctls = nil, nil, nil, nil
		sc.RunAsUser, sc.RunAsGroup, sc.FSGroup, sc.SupplementalGroups = nil, nil, nil, nil
	}
	for _, t := range targets {
		if sc := t.get(p).SecurityContext; sc != nil {
			sc.AppArmorProfile, sc.SELinuxOptions, sc.SeccompProfile, sc.Capabilities = nil, nil, nil, nil
			sc.Privileged, sc.AllowPrivilegeEscalation, sc.ProcMount, sc.RunAsUser, sc.RunAsGroup = nil, nil, nil, nil, nil
		}
	}
}

// windowsRejects lists the fields that make the API server reject p because
// it is a Windows pod (validateWindows). Admission never sees such a pod.
func windowsRejects(p *corev1.Pod) []string {
	if p.Spec.OS == nil || p.Spec.OS.Name != corev1.Windows {
		return nil
	}
	var bad []string
	if p.Spec.HostUsers != nil || p.Spec.HostPID || p.Spec.HostIPC {
		bad = append(bad, "spec.hostUsers/hostPID/hostIPC")
	}
	if sc := p.Spec.SecurityContext; sc != nil && (sc.AppArmorProfile != nil || sc.SELinuxOptions != nil || sc.SeccompProfile != nil ||
		len(sc.Sysctls) > 0 || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.FSGroup != nil || sc.SupplementalGroups != nil) {
		bad = append(bad, "spec.securityContext")
	}
	for _, t := range targets {
		if sc := t.get(p).SecurityContext; sc != nil && (sc.AppArmorProfile != nil || sc.SELinuxOptions != nil || sc.SeccompProfile != nil ||
			sc.Capabilities != nil || sc.ReadOnlyRootFilesystem != nil || sc.Privileged != nil || sc.AllowPrivilegeEscalation != nil ||
			sc.ProcMount != nil || sc.RunAsUser != nil || sc.RunAsGroup != nil) {
			bad = append(bad, t.name+".securityContext")
		}
	}
	return bad
}

// podMutations change pod-level fields.
func podMutations() []mutation {
	var ms []mutation
	add := func(desc string, f func(p *corev1.Pod)) { ms = append(ms, mutation{desc, f}) }
	for _, b := range []bool{true, false} {
		add(fmt.Sprintf("spec.hostNetwork=%v", b), func(p *corev1.Pod) { p.Spec.HostNetwork = b })
		add(fmt.Sprintf("spec.hostPID=%v", b), func(p *corev1.Pod) { p.Spec.HostPID = b })
		add(fmt.Sprintf("spec.hostIPC=%v", b), func(p *corev1.Pod) { p.Spec.HostIPC = b })
	}
	for _, v := range bools {
		add("spec.hostUsers="+show(v), func(p *corev1.Pod) { p.Spec.HostUsers = v })
		add("spec.securityContext.runAsNonRoot="+show(v), func(p *corev1.Pod) { podSC(p).RunAsNonRoot = v })
	}
	add("spec.os.name=linux", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Linux} })
	add("spec.os=nil", func(p *corev1.Pod) { p.Spec.OS = nil })
	add("spec.os.name=windows (linux-only fields cleared)", makeWindows)
	add("spec.securityContext=nil", func(p *corev1.Pod) { p.Spec.SecurityContext = nil })
	for _, v := range uids {
		add("spec.securityContext.runAsUser="+show(v), func(p *corev1.Pod) { podSC(p).RunAsUser = v })
	}
	for _, v := range seccomp {
		add("spec.securityContext.seccompProfile="+show(v), func(p *corev1.Pod) { podSC(p).SeccompProfile = v })
	}
	for _, v := range appArmor {
		add("spec.securityContext.appArmorProfile="+show(v), func(p *corev1.Pod) { podSC(p).AppArmorProfile = v })
	}
	for _, v := range seLinux {
		add("spec.securityContext.seLinuxOptions="+show(v), func(p *corev1.Pod) { podSC(p).SELinuxOptions = v })
	}
	for _, v := range hostProcess {
		add("spec.securityContext.windowsOptions="+show(v), func(p *corev1.Pod) { podSC(p).WindowsOptions = v })
	}
	for _, v := range sysctls {
		add("spec.securityContext.sysctls="+show(v), func(p *corev1.Pod) { podSC(p).Sysctls = v })
	}
	for _, v := range annotations {
		add("metadata.annotations+="+show(v), func(p *corev1.Pod) {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			for k, x := range v {
				p.Annotations[k] = x
			}
		})
	}
	for _, name := range sortedKeys(volumeSources) {
		add("spec.volumes+="+name, func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "extra-" + strings.ToLower(name), VolumeSource: volumeSources[name]})
		})
	}
	return ms
}

// containerMutations change fields of one container of each type.
func containerMutations() []mutation {
	var ms []mutation
	for _, t := range targets {
		add := func(field string, v any, f func(c *corev1.Container)) {
			ms = append(ms, mutation{fmt.Sprintf("%s.%s=%s", t.name, field, show(v)), func(p *corev1.Pod) { f(t.get(p)) }})
		}
		add("securityContext", nil, func(c *corev1.Container) { c.SecurityContext = nil })
		for _, v := range bools {
			add("securityContext.privileged", v, func(c *corev1.Container) { containerSC(c).Privileged = v })
			add("securityContext.allowPrivilegeEscalation", v, func(c *corev1.Container) { containerSC(c).AllowPrivilegeEscalation = v })
			add("securityContext.runAsNonRoot", v, func(c *corev1.Container) { containerSC(c).RunAsNonRoot = v })
		}
		for _, v := range uids {
			add("securityContext.runAsUser", v, func(c *corev1.Container) { containerSC(c).RunAsUser = v })
		}
		for _, v := range capabilities {
			add("securityContext.capabilities", v, func(c *corev1.Container) { containerSC(c).Capabilities = v })
		}
		for _, v := range procMounts {
			add("securityContext.procMount", v, func(c *corev1.Container) { containerSC(c).ProcMount = v })
		}
		for _, v := range seccomp {
			add("securityContext.seccompProfile", v, func(c *corev1.Container) { containerSC(c).SeccompProfile = v })
		}
		for _, v := range appArmor {
			add("securityContext.appArmorProfile", v, func(c *corev1.Container) { containerSC(c).AppArmorProfile = v })
		}
		for _, v := range seLinux {
			add("securityContext.seLinuxOptions", v, func(c *corev1.Container) { containerSC(c).SELinuxOptions = v })
		}
		for _, v := range hostProcess {
			add("securityContext.windowsOptions", v, func(c *corev1.Container) { containerSC(c).WindowsOptions = v })
		}
		for _, hp := range []int32{0, 8443} {
			ports := []corev1.ContainerPort{{ContainerPort: 8443, HostPort: hp}}
			add("ports", ports, func(c *corev1.Container) { c.Ports = ports })
		}
		for _, host := range []string{"", "10.0.0.1"} {
			http := &corev1.HTTPGetAction{Host: host, Port: intstr.FromInt32(8080)}
			tcp := &corev1.TCPSocketAction{Host: host, Port: intstr.FromInt32(8080)}
			add("livenessProbe.httpGet.host", host, func(c *corev1.Container) {
				c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: http}}
			})
			add("readinessProbe.tcpSocket.host", host, func(c *corev1.Container) {
				c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: tcp}}
			})
			add("startupProbe.httpGet.host", host, func(c *corev1.Container) {
				c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: http}}
			})
			add("lifecycle.postStart.httpGet.host", host, func(c *corev1.Container) {
				c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: http}}
			})
			add("lifecycle.preStop.tcpSocket.host", host, func(c *corev1.Container) {
				c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: tcp}}
			})
		}
		add("livenessProbe.exec.command", []string{"true"}, func(c *corev1.Container) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		})
	}
	return ms
}

// variants are the generated pods: every single mutation, every mutation on
// top of each context mutation, then random pairs and triples drawn with a
// fixed seed, without duplicates.
func variants() [][]mutation {
	singles := append(podMutations(), containerMutations()...)
	byDesc := map[string]mutation{}
	for _, m := range singles {
		byDesc[m.desc] = m
	}
	seen := map[string]bool{}
	var out [][]mutation
	add := func(ms ...mutation) {
		descs := make([]string, len(ms))
		for i, m := range ms {
			descs[i] = m.desc
		}
		if key := strings.Join(descs, " + "); !seen[key] {
			seen[key] = true
			out = append(out, ms)
		}
	}
	for _, m := range singles {
		add(m)
	}
	// Contexts the checks treat specially: Windows and user-namespace
	// exemptions, and the pod-level defaults containers inherit.
	for _, ctx := range []string{
		"spec.os.name=windows (linux-only fields cleared)",
		"spec.hostUsers=false",
		"spec.securityContext.seccompProfile=null",
		"spec.securityContext.runAsNonRoot=null",
	} {
		if _, ok := byDesc[ctx]; !ok {
			panic("no mutation " + ctx)
		}
		for _, m := range singles {
			if m.desc != ctx {
				add(byDesc[ctx], m)
				add(m, byDesc[ctx])
			}
		}
	}
	rng := rand.New(rand.NewPCG(20240611, 1))
	for len(out) < variantCount {
		n := 2 + rng.IntN(2)
		ms := make([]mutation, n)
		for i := range ms {
			ms[i] = singles[rng.IntN(len(singles))]
		}
		add(ms...)
	}
	return out
}

// TestVariants compares the bundle with pod-security-admission's own
// evaluator, at the newest policy version, on generated pods.
func TestVariants(t *testing.T) {
	engines := loadLevels(t)
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	base, err := runtime.DefaultUnstructuredConverter.ToUnstructured(basePod())
	if err != nil {
		t.Fatal(err)
	}

	vs := variants()
	var mismatches, windowsOverrides, rejected, denied int
	for i, ms := range append([][]mutation{nil}, vs...) {
		p := basePod()
		descs := make([]string, 0, len(ms))
		for _, m := range ms {
			m.apply(p)
			descs = append(descs, m.desc)
		}
		kind, enc := podKinds[i%len(podKinds)], encodings[(i/len(podKinds))%len(encodings)]
		applyDefaults(&p.Spec, kind.kind == "Pod")
		obj, err := wrap(p, kind, enc.encode)
		if err != nil {
			t.Fatal(err)
		}
		invalid := windowsRejects(p)
		if len(invalid) > 0 {
			rejected++
		}
		for _, l := range levels {
			agg := policy.AggregateCheckResults(evaluator.EvaluatePod(api.LevelVersion{Level: l.level, Version: api.LatestVersion()}, &p.ObjectMeta, &p.Spec))
			got, err := evaluate(engines[l.level], obj)
			if err != nil {
				t.Errorf("variant %d [%s]: %v", i, strings.Join(descs, " + "), err)
				continue
			}
			if !agg.Allowed {
				denied++
				if i == 0 {
					t.Errorf("the base pod must be allowed at %s: %s", l.level, agg.ForbiddenDetail())
				}
			}
			if got.denied == !agg.Allowed {
				continue
			}
			// The restricted capabilities and seccomp checks replace their
			// baseline counterparts and exempt Windows pods, so the reference
			// allows a Windows pod that adds capabilities or sets an
			// Unconfined profile at restricted but not at baseline. Portal
			// has no way for a rule to replace another, so restricted
			// (= baseline + restricted rules) denies it. Such a pod never
			// reaches admission: the API server rejects those fields on
			// Windows pods.
			if l.level == api.LevelRestricted && len(invalid) > 0 && got.denied && onlyOverriddenRules(got) {
				windowsOverrides++
				continue
			}
			mismatches++
			if mismatches <= 25 {
				mutated, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
				t.Errorf("variant %d [%s] as %s (%s), level %s:\n  Portal: %s\n  pod-security-admission: allowed=%v %s\n  diff from the base pod:\n    %s",
					i, strings.Join(descs, " + "), kind.kind, enc.name, l.level, got, agg.Allowed, agg.ForbiddenDetail(),
					strings.Join(diff(base, mutated), "\n    "))
			}
		}
	}
	t.Logf("%d variants (+ the base pod), %d level verdicts of which %d deny; %d variants are Windows pods the API server would reject, %d restricted verdicts on them differ as documented",
		len(vs), (len(vs)+1)*len(levels), denied, rejected, windowsOverrides)
	if mismatches > 0 {
		t.Errorf("%d level verdicts differ from pod-security-admission", mismatches)
	}
	if len(vs) < variantCount {
		t.Errorf("only %d variants generated, want %d", len(vs), variantCount)
	}
}

// onlyOverriddenRules reports whether every failing rule is a baseline rule
// whose check a restricted check replaces with a Windows exemption.
func onlyOverriddenRules(v verdict) bool {
	for _, f := range v.failing {
		if !strings.HasPrefix(f, "pss-baseline-capabilities ") && !strings.HasPrefix(f, "pss-baseline-seccomp-profile ") {
			return false
		}
	}
	return true
}

// diff lists the leaf paths whose values differ between two objects.
func diff(a, b map[string]any) []string {
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", a, fa)
	flatten("", b, fb)
	var out []string
	for k, v := range fb {
		if w, ok := fa[k]; !ok {
			out = append(out, "+ "+k+": "+v)
		} else if w != v {
			out = append(out, "~ "+k+": "+w+" -> "+v)
		}
	}
	for k, v := range fa {
		if _, ok := fb[k]; !ok {
			out = append(out, "- "+k+": "+v)
		}
	}
	slices.Sort(out)
	return out
}

func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[prefix] = "{}"
		}
		for k, e := range x {
			flatten(prefix+"."+k, e, out)
		}
	case []any:
		if len(x) == 0 {
			out[prefix] = "[]"
		}
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	default:
		out[prefix] = fmt.Sprint(x)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

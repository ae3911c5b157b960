package packaging

import (
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// SidecarName is the name of the sidecar container in everything shipped.
const SidecarName = "leader-elector"

// TokenMountPath is where client-go's in-cluster configuration looks for the
// ServiceAccount's token, CA and namespace.
const TokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// Sidecar finds the sidecar in a pod spec and says whether it is a native
// sidecar (an init container).
func Sidecar(spec *corev1.PodSpec) (c *corev1.Container, native bool, err error) {
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == SidecarName {
			return &spec.InitContainers[i], true, nil
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == SidecarName {
			return &spec.Containers[i], false, nil
		}
	}
	return nil, false, fmt.Errorf("no container named %q", SidecarName)
}

// FlagValue returns the value of --name=value in args, and whether it is
// there.
func FlagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// EnvValue returns the literal value of an environment variable of c.
func EnvValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

// CheckSidecarPod checks a pod template that runs the sidecar against what
// the project promises a user copying it: a native sidecar (wantNative) or
// an ordinary container; POD_NAME and POD_NAMESPACE from the downward API;
// readiness on /readyz and liveness on /healthz, on the probe port the
// sidecar listens on; the application API on localhost; requests and limits
// on every container; a restricted securityContext on every container;
// a termination grace period; the ServiceAccount's token mounted into the
// sidecar alone; no service link variables (enableServiceLinks: false).
// It returns every problem it finds.
func CheckSidecarPod(spec *corev1.PodSpec, wantNative bool) []error {
	sc, native, err := Sidecar(spec)
	if err != nil {
		return []error{err}
	}
	var p problems
	p.checkSidecarKind(sc, native, wantNative)
	p.checkSidecarEnv(sc)
	p.checkSidecarAddresses(sc)
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	p.checkContainers(spec, all)
	p.checkPodSettings(spec, sc)
	p.checkToken(spec, all)
	return p
}

// problems collects what CheckSidecarPod finds, in the order it checks.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// checkSidecarKind: a native sidecar is an init container that restarts
// Always; an ordinary one has no restartPolicy.
func (p *problems) checkSidecarKind(sc *corev1.Container, native, wantNative bool) {
	switch {
	case native != wantNative:
		p.add("sidecar is an init container: %v, want %v", native, wantNative)
	case native && (sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways):
		p.add("native sidecar without restartPolicy: Always")
	case !native && sc.RestartPolicy != nil:
		p.add("ordinary container with restartPolicy %q", *sc.RestartPolicy)
	}
}

// checkSidecarEnv: identity and namespace come from the downward API.
func (p *problems) checkSidecarEnv(sc *corev1.Container) {
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		i := slices.IndexFunc(sc.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || sc.Env[i].ValueFrom == nil || sc.Env[i].ValueFrom.FieldRef == nil || sc.Env[i].ValueFrom.FieldRef.FieldPath != path {
			p.add("sidecar env %s is not the downward API's %s", name, path)
		}
	}
}

// checkSidecarAddresses: the application API on localhost, and the probes
// on the port the probe server listens on.
func (p *problems) checkSidecarAddresses(sc *corev1.Container) {
	probeAddr, ok := FlagValue(sc.Args, "probe-address")
	if !ok {
		probeAddr = ":8080" // the sidecar's default
	}
	_, probePort, err := net.SplitHostPort(probeAddr)
	if err != nil {
		p.add("--probe-address %q: %v", probeAddr, err)
	}
	if v, ok := FlagValue(sc.Args, "http-address"); ok && !strings.HasPrefix(v, "127.0.0.1:") {
		p.add("--http-address %q is not on localhost", v)
	}
	p.checkProbe(sc, probePort, "readiness", sc.ReadinessProbe, "/readyz")
	p.checkProbe(sc, probePort, "liveness", sc.LivenessProbe, "/healthz")
}

// checkProbe: the sidecar's probe of kind asks path on probePort, by
// number or by the name of one of its ports.
func (p *problems) checkProbe(sc *corev1.Container, probePort, kind string, probe *corev1.Probe, path string) {
	if probe == nil || probe.HTTPGet == nil {
		p.add("sidecar has no HTTP %s probe", kind)
		return
	}
	if probe.HTTPGet.Path != path {
		p.add("%s probe path %q, want %q", kind, probe.HTTPGet.Path, path)
	}
	port := probe.HTTPGet.Port.String()
	for _, cp := range sc.Ports {
		if cp.Name == port {
			port = fmt.Sprint(cp.ContainerPort)
		}
	}
	if port != probePort {
		p.add("%s probe on port %s, but the probe server listens on %s", kind, port, probePort)
	}
}

// checkContainers: every container has requests and limits and a
// restricted security context.
func (p *problems) checkContainers(spec *corev1.PodSpec, all []corev1.Container) {
	for _, c := range all {
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				p.add("container %s has no %s request", c.Name, res)
			}
			if _, ok := c.Resources.Limits[res]; !ok {
				p.add("container %s has no %s limit", c.Name, res)
			}
		}
		csc := c.SecurityContext
		psc := spec.SecurityContext
		if csc == nil {
			csc = &corev1.SecurityContext{}
		}
		if psc == nil {
			psc = &corev1.PodSecurityContext{}
		}
		runAsNonRoot := csc.RunAsNonRoot
		if runAsNonRoot == nil {
			runAsNonRoot = psc.RunAsNonRoot
		}
		if runAsNonRoot == nil || !*runAsNonRoot {
			p.add("container %s: runAsNonRoot is not true", c.Name)
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			p.add("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			p.add("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
			p.add("container %s: capabilities do not drop ALL (or add some)", c.Name)
		}
		seccomp := csc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			p.add("container %s: seccompProfile is not RuntimeDefault", c.Name)
		}
	}
}

// checkPodSettings: the sidecar's own uid, the grace period, the
// ServiceAccount, and no automounted token or service links.
func (p *problems) checkPodSettings(spec *corev1.PodSpec, sc *corev1.Container) {
	if sc.SecurityContext == nil || sc.SecurityContext.RunAsUser == nil || *sc.SecurityContext.RunAsUser == 0 {
		p.add("sidecar: runAsUser is not set to a non-root uid on the container")
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 10 {
		p.add("terminationGracePeriodSeconds is not set to at least 10 s (the app stops first, then the sidecar releases)")
	}
	if spec.ServiceAccountName == "" || spec.ServiceAccountName == "default" {
		p.add("serviceAccountName %q: the pod must run as the ServiceAccount the Role is bound to", spec.ServiceAccountName)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("automountServiceAccountToken is not false: every container would get the token")
	}
	// The sidecar ignores service links that have a flag variable's name,
	// but what is shipped does not depend on that: no Service of the
	// namespace puts variables into these containers.
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		p.add("enableServiceLinks is not false: every Service of the namespace would put variables into the sidecar")
	}
}

// checkToken: the ServiceAccount token is mounted into the sidecar alone.
func (p *problems) checkToken(spec *corev1.PodSpec, all []corev1.Container) {
	tokenVolumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				tokenVolumes[v.Name] = true
				*p = append(*p, checkTokenVolume(v.Projected)...)
			}
		}
	}
	for _, c := range all {
		mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.MountPath == TokenMountPath && tokenVolumes[m.Name] && m.ReadOnly
		})
		if c.Name == SidecarName && !mounts {
			p.add("the sidecar does not mount a ServiceAccount token read-only at %s", TokenMountPath)
		}
		if c.Name != SidecarName && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return tokenVolumes[m.Name] }) {
			p.add("container %s mounts the ServiceAccount token", c.Name)
		}
	}
}

// checkTokenVolume checks that a projected volume holds the three files
// client-go's in-cluster configuration and the sidecar read from
// TokenMountPath: token, ca.crt and namespace.
func checkTokenVolume(p *corev1.ProjectedVolumeSource) []error {
	var token, ca, ns bool
	for _, src := range p.Sources {
		if t := src.ServiceAccountToken; t != nil && t.Path == "token" && t.Audience == "" {
			token = true
		}
		if cm := src.ConfigMap; cm != nil && cm.Name == "kube-root-ca.crt" {
			ca = slices.ContainsFunc(cm.Items, func(k corev1.KeyToPath) bool { return k.Key == "ca.crt" && k.Path == "ca.crt" })
		}
		if d := src.DownwardAPI; d != nil {
			ns = slices.ContainsFunc(d.Items, func(f corev1.DownwardAPIVolumeFile) bool {
				return f.Path == "namespace" && f.FieldRef != nil && f.FieldRef.FieldPath == "metadata.namespace"
			})
		}
	}
	var errs []error
	if !token {
		errs = append(errs, fmt.Errorf("the token volume has no API server token at path \"token\""))
	}
	if !ca {
		errs = append(errs, fmt.Errorf("the token volume has no ca.crt from ConfigMap kube-root-ca.crt"))
	}
	if !ns {
		errs = append(errs, fmt.Errorf("the token volume has no namespace file from metadata.namespace"))
	}
	return errs
}

package chartcheck

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod is a workload's pod template, with where it came from.
type Pod struct {
	Workload string // "Deployment/airlock-api"
	Selector *metav1.LabelSelector
	Template corev1.PodTemplateSpec
	Claims   []string // a StatefulSet's volumeClaimTemplates
}

// Pods returns the pod templates of the rendered workloads.
func (r *Rendered) Pods() []Pod {
	var pods []Pod
	for _, o := range r.Objects {
		switch w := o.Obj.(type) {
		case *appsv1.Deployment:
			pods = append(pods, Pod{Workload: "Deployment/" + w.Name, Selector: w.Spec.Selector, Template: w.Spec.Template})
		case *appsv1.DaemonSet:
			pods = append(pods, Pod{Workload: "DaemonSet/" + w.Name, Selector: w.Spec.Selector, Template: w.Spec.Template})
		case *appsv1.StatefulSet:
			p := Pod{Workload: "StatefulSet/" + w.Name, Selector: w.Spec.Selector, Template: w.Spec.Template}
			for _, c := range w.Spec.VolumeClaimTemplates {
				p.Claims = append(p.Claims, c.Name)
			}
			pods = append(pods, p)
		}
	}
	return pods
}

// Find returns the object of type T named name, if rendered.
func Find[T interface {
	*E
	metav1.Object
}, E any](r *Rendered, name string) T {
	for _, o := range r.Objects {
		if t, ok := o.Obj.(T); ok && t.GetName() == name {
			return t
		}
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Check runs the checks strict decoding cannot. existingSecrets are the
// Secrets the values say exist already (not rendered by the chart).
func (r *Rendered) Check(existingSecrets ...string) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	secrets := map[string]*corev1.Secret{}
	names := map[string]string{}
	for _, o := range r.Objects {
		m, ok := o.Obj.(metav1.Object)
		if !ok {
			fail("%s: not a Kubernetes object with metadata", o.Source)
			continue
		}
		kind := o.Obj.GetObjectKind().GroupVersionKind().Kind
		if prev, dup := names[kind+"/"+m.GetName()]; dup {
			fail("%s: %s/%s is also rendered by %s", o.Source, kind, m.GetName(), prev)
		}
		names[kind+"/"+m.GetName()] = o.Source
		if m.GetNamespace() != "" && m.GetNamespace() != Release.Namespace {
			fail("%s: namespace %q, want the release's", o.Source, m.GetNamespace())
		}
		for _, e := range validation.IsDNS1123Subdomain(m.GetName()) {
			fail("%s: name %q: %s", o.Source, m.GetName(), e)
		}
		errs = append(errs, checkLabels(o.Source, m.GetLabels())...)
		if s, ok := o.Obj.(*corev1.Secret); ok {
			secrets[s.Name] = s
		}
	}
	// A cert-manager Certificate writes its Secret: tls.crt, tls.key, ca.crt.
	for _, o := range r.Objects {
		if c, ok := o.Obj.(*Certificate); ok {
			if secrets[c.Spec.SecretName] != nil {
				fail("%s: Certificate %s writes Secret %s, which the chart also renders", o.Source, c.Name, c.Spec.SecretName)
			}
			secrets[c.Spec.SecretName] = &corev1.Secret{Data: map[string][]byte{"tls.crt": nil, "tls.key": nil, "ca.crt": nil}}
		}
	}
	hasSecretKey := func(name, key string) bool {
		if slices.Contains(existingSecrets, name) {
			return true
		}
		s := secrets[name]
		if s == nil {
			return false
		}
		_, a := s.Data[key]
		_, b := s.StringData[key]
		return a || b
	}

	pods := r.Pods()
	for _, p := range pods {
		sel, err := metav1.LabelSelectorAsSelector(p.Selector)
		if err != nil || p.Selector == nil || sel.Empty() {
			fail("%s: selector %v: %v (must be set and non-empty)", p.Workload, p.Selector, err)
		} else if !sel.Matches(labels.Set(p.Template.Labels)) {
			fail("%s: selector %v does not match its pod labels %v", p.Workload, p.Selector, p.Template.Labels)
		}
		errs = append(errs, checkLabels(p.Workload+" pod", p.Template.Labels)...)
		spec := p.Template.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			fail("%s: mounts a service account token; no part of Airlock uses the Kubernetes API", p.Workload)
		}
		volumes := map[string]corev1.Volume{}
		for _, name := range p.Claims {
			volumes[name] = corev1.Volume{Name: name}
		}
		for _, v := range spec.Volumes {
			if _, dup := volumes[v.Name]; dup {
				fail("%s: volume %s defined twice", p.Workload, v.Name)
			}
			volumes[v.Name] = v
			if v.Secret != nil && !slices.Contains(existingSecrets, v.Secret.SecretName) && secrets[v.Secret.SecretName] == nil {
				fail("%s: volume %s mounts Secret %s, which is neither rendered nor declared existing", p.Workload, v.Name, v.Secret.SecretName)
			}
			if v.Secret != nil {
				for _, it := range v.Secret.Items {
					if !hasSecretKey(v.Secret.SecretName, it.Key) {
						fail("%s: volume %s mounts key %q of Secret %s, which it does not have", p.Workload, v.Name, it.Key, v.Secret.SecretName)
					}
				}
			}
			if v.Projected != nil {
				paths := map[string]bool{}
				for _, src := range v.Projected.Sources {
					if src.Secret == nil {
						continue
					}
					for _, it := range src.Secret.Items {
						if !hasSecretKey(src.Secret.Name, it.Key) {
							fail("%s: volume %s projects key %q of Secret %s, which is neither rendered nor declared existing", p.Workload, v.Name, it.Key, src.Secret.Name)
						}
						if paths[it.Path] {
							fail("%s: volume %s projects two files to %s", p.Workload, v.Name, it.Path)
						}
						paths[it.Path] = true
					}
				}
			}
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			where := p.Workload + " container " + c.Name
			if c.SecurityContext == nil {
				fail("%s: no securityContext", where)
			}
			defined := map[string]bool{}
			secretEnv := map[string]bool{}
			for _, e := range c.Env {
				defined[e.Name] = true
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secretEnv[e.Name] = true
					ref := e.ValueFrom.SecretKeyRef
					if !hasSecretKey(ref.Name, ref.Key) {
						fail("%s: env %s reads key %q of Secret %s, which the chart does not render (nor is it declared existing)", where, e.Name, ref.Key, ref.Name)
					}
				}
			}
			for _, a := range append(slices.Clone(c.Command), c.Args...) {
				for _, m := range varRef.FindAllStringSubmatch(a, -1) {
					if !defined[m[1]] {
						fail("%s: argument %q uses $(%s), which its env does not define", where, a, m[1])
					}
					if secretEnv[m[1]] {
						fail("%s: argument %q puts $(%s), from a Secret, in the process's argv (read it from the environment instead)", where, a, m[1])
					}
				}
			}
			ports := map[string]bool{}
			for _, port := range c.Ports {
				ports[port.Name] = true
			}
			for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
				if pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "" && !ports[pr.HTTPGet.Port.StrVal] {
					fail("%s: probe on port %q, which the container does not name", where, pr.HTTPGet.Port.StrVal)
				}
			}
			for _, vm := range c.VolumeMounts {
				if _, ok := volumes[vm.Name]; !ok {
					fail("%s: mounts volume %s, which the pod does not define", where, vm.Name)
				}
			}
		}
	}

	podsMatching := func(sel map[string]string) int {
		n := 0
		for _, p := range pods {
			if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(p.Template.Labels)) {
				n++
			}
		}
		return n
	}
	services := map[string]*corev1.Service{}
	for _, o := range r.Objects {
		switch x := o.Obj.(type) {
		case *corev1.Service:
			services[x.Name] = x
			if podsMatching(x.Spec.Selector) == 0 {
				fail("%s: Service %s selects no rendered pod (%v)", o.Source, x.Name, x.Spec.Selector)
			}
			for _, e := range validation.IsDNS1035Label(x.Name) {
				fail("%s: Service name %q: %s", o.Source, x.Name, e)
			}
		case *policyv1.PodDisruptionBudget:
			if x.Spec.Selector == nil || podsMatching(x.Spec.Selector.MatchLabels) == 0 {
				fail("%s: PodDisruptionBudget %s selects no rendered pod", o.Source, x.Name)
			}
		}
	}
	podPorts := func(p Pod) map[string]bool {
		named := map[string]bool{}
		for _, c := range p.Template.Spec.Containers {
			for _, port := range c.Ports {
				named[port.Name] = true
			}
		}
		return named
	}
	for _, o := range r.Objects {
		np, ok := o.Obj.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		// A policy that selects nothing protects nothing; one whose peers
		// select no rendered pod (or only the protected one) shuts the door
		// on the pods it meant to let in.
		var targets []Pod
		for _, p := range pods {
			if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Template.Labels)) {
				targets = append(targets, p)
			}
		}
		if len(targets) == 0 {
			fail("%s: NetworkPolicy %s selects no rendered pod", o.Source, np.Name)
		}
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				fail("%s: NetworkPolicy %s has a rule open to every source", o.Source, np.Name)
			}
			for _, peer := range rule.From {
				if peer.PodSelector != nil && podsMatching(peer.PodSelector.MatchLabels) == 0 {
					fail("%s: NetworkPolicy %s admits pods %v, which match no rendered pod", o.Source, np.Name, peer.PodSelector.MatchLabels)
				}
				if peer.IPBlock != nil {
					if _, err := netip.ParsePrefix(peer.IPBlock.CIDR); err != nil {
						fail("%s: NetworkPolicy %s: ipBlock %q: %v", o.Source, np.Name, peer.IPBlock.CIDR, err)
					}
				}
			}
			for _, port := range rule.Ports {
				if port.Port == nil || port.Port.StrVal == "" {
					continue
				}
				for _, p := range targets {
					if !podPorts(p)[port.Port.StrVal] {
						fail("%s: NetworkPolicy %s opens port %q, which %s does not name", o.Source, np.Name, port.Port.StrVal, p.Workload)
					}
				}
			}
		}
	}
	for _, o := range r.Objects {
		if ing, ok := o.Obj.(*networkingv1.Ingress); ok {
			for _, rule := range ing.Spec.Rules {
				for _, path := range rule.HTTP.Paths {
					if b := path.Backend.Service; b == nil || services[b.Name] == nil {
						fail("%s: Ingress %s routes %s to a Service the chart does not render", o.Source, ing.Name, rule.Host)
					}
				}
			}
			for _, tls := range ing.Spec.TLS {
				if tls.SecretName == "" {
					fail("%s: Ingress %s has a TLS entry without a Secret", o.Source, ing.Name)
				}
			}
		}
	}
	return errs
}

func checkLabels(where string, l map[string]string) []error {
	var errs []error
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("%s: label key %q: %s", where, k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("%s: label %s value %q: %s", where, k, v, e))
		}
	}
	return errs
}

// Container returns the named container of a workload's pod.
func (p Pod) Container(name string) *corev1.Container {
	for i := range p.Template.Spec.Containers {
		if p.Template.Spec.Containers[i].Name == name {
			return &p.Template.Spec.Containers[i]
		}
	}
	return nil
}

// Arg returns the value of --name=value in c's args, and whether it is there.
func Arg(c *corev1.Container, name string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

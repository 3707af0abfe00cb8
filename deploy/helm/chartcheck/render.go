package chartcheck

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Release is the release the chart is rendered as.
var Release = chartutil.ReleaseOptions{Name: "airlock", Namespace: "sandboxes", Revision: 1, IsInstall: true}

// KubeVersion is the cluster version rendered for.
var KubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// scheme knows the API groups the chart may use; any other kind fails.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML into the registered Go types and fails on unknown
// or duplicated fields.
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// Object is one rendered Kubernetes object.
type Object struct {
	Source string // template file and document, e.g. "airlock/templates/api.yaml#1"
	Obj    runtime.Object
}

// Rendered is a rendered chart: its objects and its NOTES.txt.
type Rendered struct {
	Objects []Object
	Notes   string
}

// Render loads the chart at dir, renders it with values (strict: a
// template reading a value that values.yaml does not define fails) and
// decodes every object strictly.
func Render(dir string, values map[string]any) (*Rendered, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	files, err := renderFiles(ch, values)
	if err != nil {
		return nil, err
	}
	return Decode(files)
}

func renderFiles(ch *chart.Chart, values map[string]any) (map[string]string, error) {
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, KubeVersion.String()) {
		return nil, fmt.Errorf("chart kubeVersion %q does not admit %s", ch.Metadata.KubeVersion, KubeVersion.String())
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = KubeVersion
	vals, err := chartutil.ToRenderValues(ch, values, Release, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	return files, nil
}

var onlyComments = regexp.MustCompile(`^(\s*(#[^\n]*)?\n?)*$`)

// Decode splits rendered template files into documents and decodes each
// strictly.
func Decode(files map[string]string) (*Rendered, error) {
	r := &Rendered{}
	var errs []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		content := files[name]
		base := name[strings.LastIndex(name, "/")+1:]
		switch {
		case base == "NOTES.txt":
			r.Notes = content
			continue
		case strings.HasPrefix(base, "_"):
			continue
		}
		docs := releaseutil.SplitManifests(content)
		for _, key := range slices.Sorted(maps.Keys(docs)) {
			doc := docs[key]
			if onlyComments.MatchString(doc) {
				continue
			}
			src := fmt.Sprintf("%s#%s", name, strings.TrimPrefix(key, "manifest-"))
			if obj, ok, err := decodeCertManager([]byte(doc)); ok {
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", src, err))
				} else {
					r.Objects = append(r.Objects, Object{Source: src, Obj: obj})
				}
				continue
			}
			obj, gvk, err := strict.Decode([]byte(doc), nil, nil)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", src, err))
				continue
			}
			if gvk.Version == "" || gvk.Kind == "" {
				errs = append(errs, fmt.Sprintf("%s: no apiVersion or kind", src))
				continue
			}
			r.Objects = append(r.Objects, Object{Source: src, Obj: obj})
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("decoding the rendered chart strictly:\n%s", strings.Join(errs, "\n"))
	}
	return r, nil
}

package chartcheck

import (
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// admits reports whether np lets pod p in, and the ipBlocks it admits.
func admits(t *testing.T, np *networkingv1.NetworkPolicy, p Pod) bool {
	t.Helper()
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.PodSelector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Matches(labels.Set(p.Template.Labels)) {
				return true
			}
		}
	}
	return false
}

func ipBlocks(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.IPBlock != nil {
				out = append(out, peer.IPBlock.CIDR)
			}
		}
	}
	return out
}

// Review R2-5: only Airlock's api tier and nodes reach the in-chart
// PostgreSQL, and in the pod network only the api tier reaches a node's
// port. Host-network nodes are admitted by their nodes' CIDRs; without them
// the chart renders no PostgreSQL policy and says so in the notes.
func TestNetworkPolicies(t *testing.T) {
	const warn = "Every pod in the cluster can connect to it"
	cases := []struct {
		name      string
		values    map[string]any
		postgres  []string // workloads the PostgreSQL policy admits; nil: no policy
		cidrs     []string
		nodePol   bool // a policy on the nodes' port, admitting the api tier only
		warnNotes bool
	}{
		{"defaults (host network, no node CIDRs)", map[string]any{}, nil, nil, false, true},
		{"host network with node CIDRs",
			map[string]any{"networkPolicy": map[string]any{"nodeCIDRs": []any{"10.0.0.0/24"}}},
			[]string{"Deployment/airlock-api"}, []string{"10.0.0.0/24"}, false, false},
		{"pod network",
			map[string]any{"node": map[string]any{"hostNetwork": false}},
			[]string{"Deployment/airlock-api", "DaemonSet/airlock-node"}, nil, true, false},
		{"turned off",
			map[string]any{"networkPolicy": map[string]any{"enabled": false}, "node": map[string]any{"hostNetwork": false}},
			nil, nil, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(chartDir, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range r.Check(defaultTLSSecrets...) {
				t.Error(err)
			}
			pg := Find[*networkingv1.NetworkPolicy](r, "airlock-postgres")
			switch {
			case tc.postgres == nil && pg != nil:
				t.Errorf("PostgreSQL policy rendered: %+v", pg.Spec)
			case tc.postgres != nil && pg == nil:
				t.Errorf("no PostgreSQL policy")
			case pg != nil:
				var in []string
				for _, p := range r.Pods() {
					if admits(t, pg, p) {
						in = append(in, p.Workload)
					}
				}
				slices.Sort(in)
				want := slices.Sorted(slices.Values(tc.postgres))
				if !slices.Equal(in, want) {
					t.Errorf("PostgreSQL admits %v, want %v", in, want)
				}
				if got := ipBlocks(pg); !slices.Equal(got, tc.cidrs) {
					t.Errorf("PostgreSQL admits ipBlocks %v, want %v", got, tc.cidrs)
				}
			}
			np := Find[*networkingv1.NetworkPolicy](r, "airlock-node")
			if (np != nil) != tc.nodePol {
				t.Fatalf("node policy rendered: %v, want %v", np != nil, tc.nodePol)
			}
			if np != nil {
				for _, p := range r.Pods() {
					if got, want := admits(t, np, p), p.Workload == "Deployment/airlock-api"; got != want {
						t.Errorf("node port admits %s: %v, want %v", p.Workload, got, want)
					}
				}
				if len(ipBlocks(np)) != 0 {
					t.Errorf("node port admits ipBlocks %v", ipBlocks(np))
				}
			}
			if got := strings.Contains(r.Notes, warn); got != tc.warnNotes {
				t.Errorf("notes warn about an open PostgreSQL: %v, want %v\n%s", got, tc.warnNotes, r.Notes)
			}
		})
	}
}

package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// NodeLabel is the label the api tier adds to every sample of the merged
// GET /metrics: the node that reported it.
const NodeLabel = "airlock_node"

// metrics answers GET /metrics with every live and draining node's
// Prometheus metrics, each sample labelled with its node (NodeLabel), in
// the text exposition format: one scrape of the api tier covers the
// cluster. A node that fails is left out and named in X-Airlock-Partial.
func (g *Gateway) metrics(w http.ResponseWriter, r *http.Request) {
	// The classic text format from every node, whatever the scraper asked
	// for (it gets that format back: the only one parsed and merged here).
	r.Header.Set("Accept", "text/plain;version=0.0.4")
	r.Header.Del("Accept-Encoding")
	good, ok := g.merged(w, r, g.fanOut(r))
	if !ok {
		return
	}
	merged, err := mergeMetrics(good)
	if err != nil {
		writeError(w, r, http.StatusBadGateway, err.Error())
		return
	}
	var buf bytes.Buffer
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range merged {
		if err := enc.Encode(mf); err != nil {
			writeError(w, r, http.StatusInternalServerError, fmt.Sprintf("encoding the merged metrics: %v", err))
			return
		}
	}
	w.Header().Set("Content-Type", string(format))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// mergeMetrics parses each node's exposition, labels its samples with the
// node and merges the families by name (sorted; a family whose type
// differs between nodes keeps the first node's and skips the others').
func mergeMetrics(answers []nodeAnswer) ([]*dto.MetricFamily, error) {
	byName := map[string]*dto.MetricFamily{}
	for _, a := range answers {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(a.body))
		if err != nil {
			return nil, fmt.Errorf("node %s: parsing its metrics: %w", a.node.ID, err)
		}
		for name, mf := range fams {
			for _, m := range mf.Metric {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(NodeLabel), Value: proto.String(a.node.ID)})
				slices.SortFunc(m.Label, func(x, y *dto.LabelPair) int { return strings.Compare(x.GetName(), y.GetName()) })
			}
			have, ok := byName[name]
			switch {
			case !ok:
				byName[name] = mf
			case have.GetType() == mf.GetType():
				have.Metric = append(have.Metric, mf.Metric...)
			}
		}
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

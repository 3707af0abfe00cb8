package chartcheck

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Certificate is the part of cert-manager's Certificate (cert-manager.io/v1)
// the chart renders (clusterTLS.certManager); decoding it strictly refuses
// any other field, as for the Kubernetes types. cert-manager's own Go
// module is not imported: it would pull its controllers' dependencies in.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the spec of a Certificate (the fields the chart uses).
type CertificateSpec struct {
	SecretName  string   `json:"secretName"`
	CommonName  string   `json:"commonName,omitempty"`
	URIs        []string `json:"uris,omitempty"`
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
	Usages      []string `json:"usages,omitempty"`
	Duration    string   `json:"duration,omitempty"`
	RenewBefore string   `json:"renewBefore,omitempty"`
	PrivateKey  *struct {
		Algorithm      string `json:"algorithm,omitempty"`
		Size           int    `json:"size,omitempty"`
		RotationPolicy string `json:"rotationPolicy,omitempty"`
	} `json:"privateKey,omitempty"`
	IssuerRef struct {
		Name  string `json:"name"`
		Kind  string `json:"kind,omitempty"`
		Group string `json:"group,omitempty"`
	} `json:"issuerRef"`
}

// DeepCopyObject makes Certificate a runtime.Object.
func (c *Certificate) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.URIs = append([]string(nil), c.Spec.URIs...)
	out.Spec.DNSNames = append([]string(nil), c.Spec.DNSNames...)
	out.Spec.IPAddresses = append([]string(nil), c.Spec.IPAddresses...)
	out.Spec.Usages = append([]string(nil), c.Spec.Usages...)
	return &out
}

// decodeCertManager decodes doc when it is a cert-manager.io/v1
// Certificate (ok); unknown fields fail.
func decodeCertManager(doc []byte) (obj runtime.Object, ok bool, err error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil || tm.APIVersion != "cert-manager.io/v1" {
		return nil, false, nil
	}
	if tm.Kind != "Certificate" {
		return nil, true, fmt.Errorf("cert-manager.io/v1 kind %q: only Certificate is known", tm.Kind)
	}
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, true, fmt.Errorf("strict decoding error: %w", err)
	}
	var c Certificate
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, true, fmt.Errorf("strict decoding error: Certificate: %w", err)
	}
	return &c, true, nil
}

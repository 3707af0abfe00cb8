{{/* Names and labels. */}}
{{- define "airlock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "airlock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "airlock.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "airlock.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* selectorLabels takes (dict "ctx" $ "component" "api"). */}}
{{- define "airlock.selectorLabels" -}}
app.kubernetes.io/name: {{ include "airlock.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "airlock.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Secret names: the user's existing Secret, or the one the chart creates. */}}
{{- define "airlock.clusterSecretName" -}}
{{- default (printf "%s-cluster" (include "airlock.fullname" .)) .Values.clusterSecret.existingSecret -}}
{{- end -}}

{{- define "airlock.apiKeySecretName" -}}
{{- default (printf "%s-api-key" (include "airlock.fullname" .)) .Values.apiKey.existingSecret -}}
{{- end -}}

{{- define "airlock.postgresName" -}}
{{- printf "%s-postgres" (include "airlock.fullname" .) -}}
{{- end -}}

{{/* The Secret and key holding the store's connection URL. */}}
{{- define "airlock.storeSecretName" -}}
{{- if .Values.postgres.enabled -}}
{{- include "airlock.postgresName" . -}}
{{- else if .Values.store.existingSecret -}}
{{- .Values.store.existingSecret -}}
{{- else -}}
{{- printf "%s-store" (include "airlock.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "airlock.storeSecretKey" -}}
{{- if .Values.postgres.enabled -}}dsn{{- else -}}{{ .Values.store.key }}{{- end -}}
{{- end -}}

{{- define "airlock.artifactsSecretName" -}}
{{- default (printf "%s-artifacts" (include "airlock.fullname" .)) .Values.artifacts.existingSecret -}}
{{- end -}}

{{/*
airlock.secretValue takes (dict "ctx" $ "name" SECRET "key" KEY "value" VALUE "length" N)
and prints the base64 value: VALUE when set, else the one already in the
cluster (an upgrade keeps it), else a random one.
*/}}
{{- define "airlock.secretValue" -}}
{{- if .value -}}
{{- .value | b64enc -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $old (hasKey $old "data") (hasKey $old.data .key) -}}
{{- index $old.data .key -}}
{{- else -}}
{{- randAlphaNum (int .length) | b64enc -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Env of both roles: the store URL (AIRLOCK_STORE, which `airlock serve` reads
as --store's default), and the S3 settings when artifacts.url is set (the
names internal/artifacts reads).
*/}}
{{- define "airlock.commonEnv" -}}
- name: AIRLOCK_STORE
  valueFrom:
    secretKeyRef:
      name: {{ include "airlock.storeSecretName" . }}
      key: {{ include "airlock.storeSecretKey" . }}
{{- if .Values.artifacts.url }}
{{- with .Values.artifacts.endpoint }}
- name: AIRLOCK_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.artifacts.region }}
- name: AWS_REGION
  value: {{ . | quote }}
{{- end }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "airlock.artifactsSecretName" . }}
      key: {{ .Values.artifacts.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "airlock.artifactsSecretName" . }}
      key: {{ .Values.artifacts.secretAccessKeyKey }}
{{- end }}
{{- end -}}

{{/*
Flags of both roles. The store URL is not one: the binary reads
$AIRLOCK_STORE (commonEnv) itself, so its password stays out of argv.
*/}}
{{- define "airlock.commonArgs" -}}
- --cluster-secret-file=/etc/airlock/cluster/{{ .Values.clusterSecret.key }}
- --cluster-tls-dir=/etc/airlock/cluster-tls
{{- with .Values.artifacts.url }}
- --artifacts={{ . }}
{{- end }}
- --log-level={{ .Values.logLevel }}
- --log-format={{ .Values.logFormat }}
{{- end -}}

{{/*
Cluster TLS (clusterTLS.*): the Secrets the api tier and the nodes mount as
--cluster-tls-dir. With cert-manager the chart's Certificates write them.
*/}}
{{- define "airlock.apiTLSSecretName" -}}
{{- if .Values.clusterTLS.certManager.enabled -}}
{{- printf "%s-cluster-tls-api" (include "airlock.fullname" .) -}}
{{- else -}}
{{- default (printf "%s-cluster-tls-api" (include "airlock.fullname" .)) .Values.clusterTLS.apiSecret -}}
{{- end -}}
{{- end -}}

{{- define "airlock.nodeTLSSecretName" -}}
{{- default (printf "%s-cluster-tls-node" (include "airlock.fullname" .)) .Values.clusterTLS.nodeSecret -}}
{{- end -}}

{{/* The Secret cert-manager writes for node NAME: (dict "ctx" $ "node" NAME). */}}
{{- define "airlock.nodeCertSecretName" -}}
{{- printf "%s-node-tls-%s" (include "airlock.fullname" .ctx) .node | trunc 253 -}}
{{- end -}}

{{/* The api pod's TLS volume (ca.crt, api.crt, api.key). */}}
{{- define "airlock.apiTLSVolume" -}}
- name: cluster-tls
  secret:
    secretName: {{ include "airlock.apiTLSSecretName" . }}
    defaultMode: 0400
    {{- if .Values.clusterTLS.certManager.enabled }}
    items:
      - key: ca.crt
        path: ca.crt
      - key: tls.crt
        path: api.crt
      - key: tls.key
        path: api.key
    {{- end }}
{{- end -}}

{{/*
The node pods' TLS volume: every listed node's certificate as
<node>.crt/<node>.key with ca.crt (cert-manager), the host's own directory
(nodeHostPath), or the nodes' Secret.
*/}}
{{- define "airlock.nodeTLSVolume" -}}
{{- $tls := .Values.clusterTLS -}}
- name: cluster-tls
{{- if $tls.certManager.enabled }}
  projected:
    defaultMode: 0400
    sources:
      {{- range $i, $n := $tls.certManager.nodes }}
      - secret:
          name: {{ include "airlock.nodeCertSecretName" (dict "ctx" $ "node" $n) }}
          items:
            {{- if eq $i 0 }}
            - key: ca.crt
              path: ca.crt
            {{- end }}
            - key: tls.crt
              path: {{ $n }}.crt
            - key: tls.key
              path: {{ $n }}.key
      {{- end }}
{{- else if $tls.nodeHostPath }}
  hostPath:
    path: {{ $tls.nodeHostPath }}
    type: Directory
{{- else }}
  secret:
    secretName: {{ include "airlock.nodeTLSSecretName" . }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{/* The shared volume root's claim (values: volumes): the existing one, else the chart's. */}}
{{- define "airlock.volumesClaim" -}}
{{- if .Values.volumes.existingClaim -}}
{{- .Values.volumes.existingClaim -}}
{{- else -}}
{{- include "airlock.fullname" . }}-volumes
{{- end -}}
{{- end -}}

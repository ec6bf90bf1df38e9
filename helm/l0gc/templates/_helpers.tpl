{{/*
Chart name, cut to 63 characters (a DNS label).
*/}}
{{- define "l0gc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, cut to 63 characters. If the release name contains the chart
name it is used as is.
*/}}
{{- define "l0gc.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Sweeper object names. Cut to 52 characters: a StatefulSet's controller-revision-hash
label and a CronJob's Job names append 11 characters and must stay within 63.
*/}}
{{- define "l0gc.sweeper.fullname" -}}
{{- printf "%s-sweeper" (include "l0gc.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "l0gc.publisher.fullname" -}}
{{- printf "%s-publisher" (include "l0gc.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Chart name and version for the helm.sh/chart label.
*/}}
{{- define "l0gc.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "l0gc.labels" -}}
helm.sh/chart: {{ include "l0gc.chart" . }}
{{ include "l0gc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: l0gc
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels: only name and instance. Workloads add app.kubernetes.io/component to
their own selectors, because the sweeper and the publisher of one release must not
select each other's pods.
*/}}
{{- define "l0gc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "l0gc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Image reference: the digest wins over the tag; the tag defaults to the appVersion.
*/}}
{{- define "l0gc.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "l0gc.sweeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "l0gc.sweeper.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "l0gc.publisher.serviceAccountName" -}}
{{- if .Values.publisher.serviceAccount.create }}
{{- default (include "l0gc.publisher.fullname" .) .Values.publisher.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.publisher.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
True ("true") when the sweeper runs as a long-lived daemon (has a metrics port).
*/}}
{{- define "l0gc.sweeper.isDaemon" -}}
{{- if and .Values.sweeper.enabled (has .Values.sweeper.mode (list "deployment" "statefulset")) }}true{{ end }}
{{- end }}

{{/*
One ConfigMap entry per non-empty setting. Input: dict "settings" (env name -> value).
Whole numbers are printed as integers (YAML numbers reach templates as float64, and
toString would turn 1000000 into "1e+06").
*/}}
{{- define "l0gc.configData" -}}
{{- range $name, $value := .settings }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
{{- if not (or (kindIs "invalid" $value) (eq (toString $value) "")) }}
{{ $name }}: {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Container env for etcd TLS files and credentials: Secret references and paths of
mounted Secret files only, never a secret value.
*/}}
{{- define "l0gc.etcdEnv" -}}
{{- $etcd := .Values.etcd }}
{{- if $etcd.tls.enabled }}
{{- if ne (empty $etcd.tls.certKey) (empty $etcd.tls.keyKey) }}
{{- fail "etcd.tls.certKey and etcd.tls.keyKey go together: set both (mutual TLS) or neither" }}
{{- end }}
- name: L0GC_ETCD_CA_FILE
  value: /etc/l0gc/etcd-tls/ca.crt
{{- if $etcd.tls.certKey }}
- name: L0GC_ETCD_CERT_FILE
  value: /etc/l0gc/etcd-tls/tls.crt
{{- end }}
{{- if $etcd.tls.keyKey }}
- name: L0GC_ETCD_KEY_FILE
  value: /etc/l0gc/etcd-tls/tls.key
{{- end }}
{{- end }}
{{- if $etcd.auth.enabled }}
- name: L0GC_ETCD_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ required "etcd.auth.existingSecret is required when etcd.auth.enabled is true" $etcd.auth.existingSecret }}
      key: {{ $etcd.auth.usernameKey }}
- name: L0GC_ETCD_PASSWORD_FILE
  value: /etc/l0gc/etcd-auth/password
{{- end }}
{{- end }}

{{- define "l0gc.etcdVolumeMounts" -}}
{{- if .Values.etcd.tls.enabled }}
- name: etcd-tls
  mountPath: /etc/l0gc/etcd-tls
  readOnly: true
{{- end }}
{{- if .Values.etcd.auth.enabled }}
- name: etcd-auth
  mountPath: /etc/l0gc/etcd-auth
  readOnly: true
{{- end }}
{{- end }}

{{/*
Secret volumes: only the needed keys, readable by the pod's group (fsGroup).
*/}}
{{- define "l0gc.etcdVolumes" -}}
{{- $etcd := .Values.etcd }}
{{- if $etcd.tls.enabled }}
- name: etcd-tls
  secret:
    secretName: {{ required "etcd.tls.existingSecret is required when etcd.tls.enabled is true" $etcd.tls.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $etcd.tls.caKey }}
        path: ca.crt
      {{- if $etcd.tls.certKey }}
      - key: {{ $etcd.tls.certKey }}
        path: tls.crt
      {{- end }}
      {{- if $etcd.tls.keyKey }}
      - key: {{ $etcd.tls.keyKey }}
        path: tls.key
      {{- end }}
{{- end }}
{{- if $etcd.auth.enabled }}
- name: etcd-auth
  secret:
    secretName: {{ $etcd.auth.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $etcd.auth.passwordKey }}
        path: password
{{- end }}
{{- end }}

{{/*
Static S3 credentials, from an existing Secret only.
*/}}
{{- define "l0gc.s3Env" -}}
{{- $creds := .Values.s3.credentials }}
{{- if $creds.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $creds.existingSecret }}
      key: {{ $creds.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $creds.existingSecret }}
      key: {{ $creds.secretAccessKeyKey }}
{{- if $creds.sessionTokenKey }}
- name: AWS_SESSION_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $creds.existingSecret }}
      key: {{ $creds.sessionTokenKey }}
{{- end }}
{{- end }}
{{- end }}

{{/*
HTTP probes on the product's endpoints. Input: dict "port" (port name), "liveness",
"readiness" (timing values).
*/}}
{{- define "l0gc.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  {{- toYaml .liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  {{- toYaml .readiness | nindent 2 }}
{{- end }}

{{/*
The writable /tmp (read-only root filesystem).
*/}}
{{- define "l0gc.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
{{- end }}

{{/*
NetworkPolicy egress rules shared by the sweeper and the publisher: DNS, etcd, extras.
*/}}
{{- define "l0gc.egressPeers" -}}
{{- $peers := list }}
{{- range .cidrs }}
{{- $peers = append $peers (dict "ipBlock" (dict "cidr" .)) }}
{{- end }}
{{- $peers = concat $peers .peers }}
{{- if $peers }}
- to:
    {{- toYaml $peers | nindent 4 }}
  ports:
    {{- toYaml .ports | nindent 4 }}
{{- else }}
- ports:
    {{- toYaml .ports | nindent 4 }}
{{- end }}
{{- end }}

{{- define "l0gc.dnsEgress" -}}
{{- $dns := .Values.networkPolicy.dns }}
{{- if $dns.enabled }}
{{- if $dns.to }}
- to:
    {{- toYaml $dns.to | nindent 4 }}
  ports:
    {{- toYaml $dns.ports | nindent 4 }}
{{- else }}
- ports:
    {{- toYaml $dns.ports | nindent 4 }}
{{- end }}
{{- end }}
{{- end }}

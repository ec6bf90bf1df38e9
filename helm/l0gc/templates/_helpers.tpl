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
"readiness", "startup" (timing values; startup also `enabled`), optional "scheme" (HTTPS)
and "tcp" (true: TCP connect checks, for a server that asks every client for a
certificate the kubelet cannot give). The startup probe asks /healthz, like liveness.
*/}}
{{- define "l0gc.probes" -}}
{{- $probes := list (list "livenessProbe" "/healthz" $.liveness) (list "readinessProbe" "/readyz" $.readiness) }}
{{- if $.startup.enabled }}
{{- $probes = append $probes (list "startupProbe" "/healthz" (omit $.startup "enabled")) }}
{{- end }}
{{- range $probe := $probes }}
{{ index $probe 0 }}:
  {{- if $.tcp }}
  tcpSocket:
    port: {{ $.port }}
  {{- else }}
  httpGet:
    path: {{ index $probe 1 }}
    port: {{ $.port }}
    {{- with $.scheme }}
    scheme: {{ . }}
    {{- end }}
  {{- end }}
  {{- toYaml (index $probe 2) | nindent 2 }}
{{- end }}
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

{{/*
The etcd endpoints as the comma-separated list the CLIs take (L0GC_ETCD), from a list
(`--set 'etcd.endpoints={a:2379,b:2379}'`, or a values file) or one string. Refuses to
render without any: every process would otherwise try 127.0.0.1:2379 in its own pod.
*/}}
{{- define "l0gc.etcdEndpoints" -}}
{{- $endpoints := .Values.etcd.endpoints }}
{{- if kindIs "slice" $endpoints }}
{{- $endpoints = join "," $endpoints }}
{{- end }}
{{- if not $endpoints }}
{{- fail "etcd.endpoints is required: the etcd client endpoints holding the GC state, e.g. --set 'etcd.endpoints={etcd-0.etcd:2379,etcd-1.etcd:2379}' or in a values file `etcd: {endpoints: [etcd-0.etcd:2379, etcd-1.etcd:2379]}`" }}
{{- end }}
{{- $endpoints }}
{{- end }}

{{/*
A duration as plain seconds, for options that take seconds only (`watermark serve`,
--etcd-timeout): 10, "10", "10s" -> 10; "500ms" -> 0.5; "5m" -> 300; "1h" -> 3600;
"1d" -> 86400. Empty stays empty (the CLI default applies). Input: dict "value" and
"name" (the value's path, for the error message).
*/}}
{{- define "l0gc.seconds" -}}
{{- $value := .value }}
{{- if not (or (kindIs "invalid" $value) (eq (toString $value) "")) }}
{{- $text := toString $value | trim }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d)?$" $text) }}
{{- fail (printf "%s=%q is not a duration: give seconds or a number with ms, s, m, h or d, e.g. 10s or 5m" .name $text) }}
{{- end }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $text }}
{{- $factor := get (dict "" 1.0 "s" 1.0 "ms" 0.001 "m" 60.0 "h" 3600.0 "d" 86400.0) (trimPrefix $number $text) }}
{{- $seconds := mulf (float64 $number) $factor }}
{{- if eq $seconds (floor $seconds) }}{{ int64 $seconds }}{{ else }}{{ $seconds }}{{ end }}
{{- end }}
{{- end }}

{{/*
The publisher's partitions as one comma-separated list (L0GC_PARTITIONS): a list is
joined, a string kept. Ranges (`orders/0-63`) are expanded by `watermark serve` itself.
*/}}
{{- define "l0gc.publisher.partitions" -}}
{{- $partitions := .Values.publisher.config.partitions }}
{{- if kindIs "slice" $partitions }}
{{- $names := list }}
{{- range $partitions }}
{{- $names = append $names (ternary (int64 .) . (kindIs "float64" .) | toString) }}
{{- end }}
{{- join "," $names }}
{{- else }}
{{- $partitions }}
{{- end }}
{{- end }}

{{/*
Name of the Secret with the publisher's token file: the existing one, or the chart's.
*/}}
{{- define "l0gc.publisher.authSecretName" -}}
{{- if .Values.publisher.auth.existingSecret }}
{{- .Values.publisher.auth.existingSecret }}
{{- else }}
{{- printf "%s-auth" (include "l0gc.publisher.fullname" . | trunc 58 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/*
Checks of the publisher's authentication and TLS values; fails with what to set.
*/}}
{{- define "l0gc.publisher.checkAuth" -}}
{{- $auth := .Values.publisher.auth }}
{{- $tls := .Values.publisher.tls }}
{{- if and $auth.existingSecret $auth.tokens }}
{{- fail "publisher.auth.existingSecret and publisher.auth.tokens exclude each other: keep the tokens in the existing Secret" }}
{{- end }}
{{- if and $tls.enabled (not $tls.existingSecret) }}
{{- fail "publisher.tls.existingSecret is required when publisher.tls.enabled is true (a Secret with the server certificate and key)" }}
{{- end }}
{{- if and $tls.clientCa.existingSecret (not $tls.enabled) }}
{{- fail "publisher.tls.clientCa.existingSecret needs publisher.tls.enabled=true: client certificates are asked for over HTTPS only" }}
{{- end }}
{{- $authenticated := or $auth.existingSecret $auth.tokens $tls.clientCa.existingSecret }}
{{- if and $auth.insecureNoAuth $authenticated }}
{{- fail "publisher.auth.insecureNoAuth=true contradicts the tokens or client CA that are configured: remove one" }}
{{- end }}
{{- if not (or $authenticated $auth.insecureNoAuth) }}
{{- fail "the publisher needs authentication: it listens on the pod's address, and anyone who can call its API can get live objects deleted. Set publisher.auth.existingSecret (a Secret with a token file, lines ROLE:TOKEN), publisher.auth.tokens, or publisher.tls.clientCa.existingSecret (mutual TLS); only on a trusted network, publisher.auth.insecureNoAuth=true" }}
{{- end }}
{{- end }}

{{/*
Container env of the publisher's API security: paths of mounted Secret files only.
*/}}
{{- define "l0gc.publisher.authEnv" -}}
{{- $auth := .Values.publisher.auth }}
{{- $tls := .Values.publisher.tls }}
{{- if or $auth.existingSecret $auth.tokens }}
- name: L0GC_AUTH_TOKEN_FILE
  value: /etc/l0gc/publisher-auth/tokens
{{- end }}
{{- if $tls.enabled }}
- name: L0GC_TLS_CERT_FILE
  value: /etc/l0gc/publisher-tls/tls.crt
- name: L0GC_TLS_KEY_FILE
  value: /etc/l0gc/publisher-tls/tls.key
{{- end }}
{{- if $tls.clientCa.existingSecret }}
- name: L0GC_TLS_CLIENT_CA_FILE
  value: /etc/l0gc/publisher-client-ca/ca.crt
{{- end }}
{{- end }}

{{- define "l0gc.publisher.authVolumeMounts" -}}
{{- $auth := .Values.publisher.auth }}
{{- $tls := .Values.publisher.tls }}
{{- if or $auth.existingSecret $auth.tokens }}
- name: publisher-auth
  mountPath: /etc/l0gc/publisher-auth
  readOnly: true
{{- end }}
{{- if $tls.enabled }}
- name: publisher-tls
  mountPath: /etc/l0gc/publisher-tls
  readOnly: true
{{- end }}
{{- if $tls.clientCa.existingSecret }}
- name: publisher-client-ca
  mountPath: /etc/l0gc/publisher-client-ca
  readOnly: true
{{- end }}
{{- end }}

{{- define "l0gc.publisher.authVolumes" -}}
{{- $auth := .Values.publisher.auth }}
{{- $tls := .Values.publisher.tls }}
{{- if or $auth.existingSecret $auth.tokens }}
- name: publisher-auth
  secret:
    secretName: {{ include "l0gc.publisher.authSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ ternary $auth.existingSecretKey "tokens" (not (empty $auth.existingSecret)) }}
        path: tokens
{{- end }}
{{- if $tls.enabled }}
- name: publisher-tls
  secret:
    secretName: {{ $tls.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $tls.certKey }}
        path: tls.crt
      - key: {{ $tls.keyKey }}
        path: tls.key
{{- end }}
{{- if $tls.clientCa.existingSecret }}
- name: publisher-client-ca
  secret:
    secretName: {{ $tls.clientCa.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $tls.clientCa.key }}
        path: ca.crt
{{- end }}
{{- end }}

{{/*
L0GC_BUCKET: required for S3, gcs.bucket with gcs.enabled, empty (and refused if set)
with azure.enabled.
*/}}
{{- define "l0gc.bucket" -}}
{{- if .Values.gcs.enabled -}}
{{- if .Values.s3.bucket -}}
{{- fail "s3.bucket must stay empty with gcs.enabled: the sweeper then sweeps gcs.bucket" -}}
{{- end -}}
{{- required "gcs.bucket is required with gcs.enabled: the GCS bucket holding the L0 objects, e.g. --set gcs.bucket=my-l0-bucket" .Values.gcs.bucket -}}
{{- else if .Values.azure.enabled -}}
{{- if .Values.s3.bucket -}}
{{- fail "s3.bucket must stay empty with azure.enabled: the sweeper then sweeps azure.container" -}}
{{- end -}}
{{- else -}}
{{- required "s3.bucket is required while the sweeper is enabled: the bucket holding the L0 objects, e.g. --set s3.bucket=my-l0-bucket" .Values.s3.bucket -}}
{{- end -}}
{{- end }}

{{/*
The pods' affinity: the workload's `affinity` when set, else the anti-affinity of its
`podAntiAffinityPreset` (soft: preferred, hard: required) against the pods of the same
component, one per node. Input: dict "ctx" (root), "component", "values" (the workload's).
*/}}
{{- define "l0gc.affinity" -}}
{{- $v := .values }}
{{- if $v.affinity }}
{{- toYaml $v.affinity }}
{{- else if $v.podAntiAffinityPreset }}
{{- $selector := include "l0gc.selectorLabels" .ctx | fromYaml }}
{{- $_ := set $selector "app.kubernetes.io/component" .component }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $selector) }}
podAntiAffinity:
  {{- if eq $v.podAntiAffinityPreset "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - {{- toYaml $term | nindent 6 }}
  {{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 1
      podAffinityTerm:
        {{- toYaml $term | nindent 8 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
A list value of the user's (extra volumes, containers...) rendered through `tpl`, so it
may use the chart's templates, e.g. {{ include "l0gc.fullname" . }}. Input: dict "value",
"ctx" (root). Empty when the list is.
*/}}
{{- define "l0gc.userList" -}}
{{- with .value }}{{ tpl (toYaml .) $.ctx }}{{- end }}
{{- end }}

{{/*
Refuse a secret-looking setting in a component's `env` (rendered into a ConfigMap,
readable by whoever may read ConfigMaps), naming the key and the Secret-based value that
carries it instead. A template check rather than the schema's `not`, whose message
("Must not validate the schema (not)") said neither. Input: dict "path" (e.g.
"sweeper.env") and "env".
*/}}
{{- define "l0gc.checkEnvSecrets" -}}
{{- range $name, $_ := .env }}
{{- if regexMatch "(PASSWORD|SECRET|TOKEN|ACCESS_KEY)" $name }}
{{- fail (printf "%s.%s looks like a secret, and %s lands in a ConfigMap: pass secrets from Secrets you create (etcd.auth.existingSecret for the etcd password, s3.credentials.existingSecret for S3 keys, azure.connectionString.existingSecret, gcs.credentials.existingSecret, publisher.auth.existingSecret for API tokens)" $.path $name $.path) }}
{{- end }}
{{- end }}
{{- end }}

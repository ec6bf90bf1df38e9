{{/*
Pod template of the sweeper, shared by the Deployment, the StatefulSet and the CronJob.
Input: dict "ctx" (the root context) and "oneShot" (true for `gcd sweep` in a CronJob).
*/}}
{{- define "l0gc.sweeper.podTemplate" -}}
{{- $ := .ctx }}
{{- $oneShot := .oneShot }}
{{- $sw := $.Values.sweeper -}}
metadata:
  labels:
    {{- include "l0gc.selectorLabels" $ | nindent 4 }}
    app.kubernetes.io/component: sweeper
    {{- if and $.Values.azure.enabled $.Values.azure.workloadIdentityClientId }}
    azure.workload.identity/use: "true"
    {{- end }}
    {{- with $sw.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/sweeper-configmap.yaml") $ | sha256sum }}
    {{- with $sw.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "l0gc.sweeper.serviceAccountName" $ }}
  automountServiceAccountToken: {{ $.Values.serviceAccount.automountServiceAccountToken }}
  {{- with $.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $oneShot }}
  restartPolicy: Never
  {{- end }}
  terminationGracePeriodSeconds: {{ $sw.terminationGracePeriodSeconds }}
  securityContext:
    {{- toYaml $.Values.podSecurityContext | nindent 4 }}
  {{- with $sw.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with include "l0gc.userList" (dict "value" $sw.initContainers "ctx" $) }}
  initContainers:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - name: sweeper
      image: {{ include "l0gc.image" $ | quote }}
      imagePullPolicy: {{ $.Values.image.pullPolicy }}
      command: ["gcd"]
      args:
        {{- if $oneShot }}
        - sweep
        - --json
        {{- if $sw.cronjob.pausedOk }}
        # A paused GC (gcd pause) exits 0: the Job succeeds; other blocks still exit 3.
        - --paused-ok
        {{- end }}
        {{- else }}
        - daemon
        - --http-host
        - {{ $sw.http.host | quote }}
        - --http-port
        - {{ $sw.http.port | quote }}
        {{- end }}
        {{- if include "l0gc.sweeper.shardEnv" (dict "ctx" $ "oneShot" $oneShot) }}
        # Also as a flag: an empty index (label missing) is then a usage error, where an
        # empty variable alone would count as unset and silently mean shard 0.
        - --shard-index
        - "$(L0GC_SHARD_INDEX)"
        {{- end }}
        {{- if $sw.dryRun }}
        - --dry-run
        {{- end }}
        {{- range $sw.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      envFrom:
        - configMapRef:
            name: {{ include "l0gc.sweeper.fullname" $ }}
        {{- with include "l0gc.userList" (dict "value" $sw.extraEnvFrom "ctx" $) }}{{ . | nindent 8 }}{{ end }}
      {{- $env := include "l0gc.sweeper.shardEnv" (dict "ctx" $ "oneShot" $oneShot) }}
      {{- $env = print $env (include "l0gc.etcdEnv" $) (include "l0gc.s3Env" $) }}
      {{- with include "l0gc.userList" (dict "value" $sw.extraEnv "ctx" $) }}{{ $env = print $env "\n" . }}{{ end }}
      {{- if $env }}
      env:
        {{- $env | trim | nindent 8 }}
      {{- end }}
      {{- if not $oneShot }}
      ports:
        - name: metrics
          containerPort: {{ $sw.http.port }}
          protocol: TCP
      {{- include "l0gc.probes" (dict "port" "metrics" "liveness" $sw.livenessProbe "readiness" $sw.readinessProbe "startup" $sw.startupProbe) | nindent 6 }}
      {{- end }}
      resources:
        {{- toYaml $sw.resources | nindent 8 }}
      securityContext:
        {{- toYaml $.Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if $.Values.sweeper.journal.enabled }}
        - name: journal
          mountPath: /var/lib/l0gc/journal
        {{- end }}
        {{- with include "l0gc.etcdVolumeMounts" $ }}{{ . | trim | nindent 8 }}{{ end }}
        {{- if and $.Values.azure.enabled $.Values.azure.connectionString.existingSecret }}
        - name: azure-connection-string
          mountPath: /var/run/l0gc/azure
          readOnly: true
        {{- end }}
        {{- if and $.Values.gcs.enabled $.Values.gcs.credentials.existingSecret }}
        - name: gcs-credentials
          mountPath: /var/run/l0gc/gcs
          readOnly: true
        {{- end }}
        {{- with include "l0gc.userList" (dict "value" $sw.extraVolumeMounts "ctx" $) }}{{ . | nindent 8 }}{{ end }}
    {{- with include "l0gc.userList" (dict "value" $sw.sidecars "ctx" $) }}{{ . | nindent 4 }}{{ end }}
  volumes:
    {{- include "l0gc.tmpVolume" $ | nindent 4 }}
    {{- if $.Values.sweeper.journal.enabled }}
    # The journal spool: the open segment, and closed ones until shipped and verified.
    - name: journal
      emptyDir:
        sizeLimit: {{ $.Values.sweeper.journal.sizeLimit }}
    {{- end }}
    {{- with include "l0gc.etcdVolumes" $ }}{{ . | trim | nindent 4 }}{{ end }}
    {{- if and $.Values.azure.enabled $.Values.azure.connectionString.existingSecret }}
    - name: azure-connection-string
      secret:
        secretName: {{ $.Values.azure.connectionString.existingSecret }}
        defaultMode: 0440
        items:
          - key: {{ $.Values.azure.connectionString.key }}
            path: connection-string
    {{- end }}
    {{- if and $.Values.gcs.enabled $.Values.gcs.credentials.existingSecret }}
    - name: gcs-credentials
      secret:
        secretName: {{ $.Values.gcs.credentials.existingSecret }}
        defaultMode: 0440
        items:
          - key: {{ $.Values.gcs.credentials.key }}
            path: key.json
    {{- end }}
    {{- with include "l0gc.userList" (dict "value" $sw.extraVolumes "ctx" $) }}{{ . | nindent 4 }}{{ end }}
  {{- with $sw.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "l0gc.affinity" (dict "ctx" $ "component" "sweeper" "values" $sw) }}
  affinity:
    {{- . | trim | nindent 4 }}
  {{- end }}
  {{- with $sw.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $sw.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
Shard assignment. StatefulSet: the pod's ordinal, from the pod-index label the
StatefulSet controller sets (Kubernetes >= 1.28); CronJob with shards > 1: the
completion index of the Indexed Job. No shell, no init container.
*/}}
{{- define "l0gc.sweeper.shardEnv" -}}
{{- $ := .ctx }}
{{- $sw := $.Values.sweeper }}
{{- if eq $sw.mode "statefulset" }}
- name: L0GC_SHARD_INDEX
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
- name: L0GC_SHARD_COUNT
  value: {{ $sw.shards | quote }}
{{- else if and .oneShot (gt (int $sw.shards) 1) }}
- name: L0GC_SHARD_INDEX
  valueFrom:
    fieldRef:
      fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
- name: L0GC_SHARD_COUNT
  value: {{ $sw.shards | quote }}
{{- end }}
{{- end }}

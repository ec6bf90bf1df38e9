{{/*
The publisher replicas (`watermark serve --replicated`): their headless Service, the
address each one announces, and the checks of the replication values.
*/}}

{{/*
The headless Service that resolves to every publisher replica's address (the addresses
the replicas redirect writers to). Its own component label, so that the publisher's
ServiceMonitor (which selects the `publisher` Service) does not scrape every pod twice.
*/}}
{{- define "l0gc.publisher.peersName" -}}
{{- printf "%s-peers" (include "l0gc.publisher.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/*
The URL a replica announces (--advertise-url): the value, or the pod's IP and http port.
Kubernetes expands $(L0GC_POD_IP) in the container's arguments.
*/}}
{{- define "l0gc.publisher.advertiseUrl" -}}
{{- $pub := .Values.publisher }}
{{- $scheme := ternary "https" "http" (eq (toString $pub.tls.enabled) "true") }}
{{- $pub.replication.advertiseUrl | default (printf "%s://$(L0GC_POD_IP):%v" $scheme $pub.http.port) }}
{{- end }}

{{/*
Without replication every replica adopts every partition at start: only one may run,
and an upgrade must stop it before its successor starts.
*/}}
{{- define "l0gc.publisher.checkReplication" -}}
{{- $pub := .Values.publisher }}
{{- if not $pub.replication.enabled }}
{{- if gt (int $pub.replicas) 1 }}
{{- fail (printf "publisher.replicas=%v needs publisher.replication.enabled=true: without it every replica adopts every partition and they fence each other out" $pub.replicas) }}
{{- end }}
{{- if ne $pub.strategy.type "Recreate" }}
{{- fail "publisher.replication.enabled=false needs publisher.strategy.type=Recreate: a rolling update would run two owners of every partition at once" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Container env of a replica: its pod IP, for --advertise-url.
*/}}
{{- define "l0gc.publisher.replicaEnv" -}}
{{- if .Values.publisher.replication.enabled }}
- name: L0GC_POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- end }}

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
The DNS suffix of the replicas' stable names: PEERS.NAMESPACE.svc.CLUSTER_DOMAIN.
*/}}
{{- define "l0gc.publisher.peersDomain" -}}
{{- printf "%s.%s.svc.%s" (include "l0gc.publisher.peersName" .) .Release.Namespace .Values.publisher.replication.clusterDomain }}
{{- end }}

{{/*
The URL a replica announces (--advertise-url): the value, or the pod's stable name
(StatefulSet pod POD under the peers Service) and http port. Kubernetes expands
$(L0GC_POD_NAME) in the container's arguments.
*/}}
{{- define "l0gc.publisher.advertiseUrl" -}}
{{- $pub := .Values.publisher }}
{{- $scheme := ternary "https" "http" (eq (toString $pub.tls.enabled) "true") }}
{{- $pub.replication.advertiseUrl | default (printf "%s://$(L0GC_POD_NAME).%s:%v" $scheme (include "l0gc.publisher.peersDomain" .) $pub.http.port) }}
{{- end }}

{{/*
The fleet (--fleet-urls; the same pattern writers are given): every stable name under
the peers Service on the http port, plus `replication.fleetUrls`. Always set, so that a
forged member record outside it gets no partition and no redirect.
*/}}
{{- define "l0gc.publisher.fleetUrls" -}}
{{- $pub := .Values.publisher }}
{{- $scheme := ternary "https" "http" (eq (toString $pub.tls.enabled) "true") }}
{{- $own := list }}
{{- if not $pub.replication.advertiseUrl }}
{{- $own = list (printf "%s://*.%s:%v" $scheme (include "l0gc.publisher.peersDomain" .) $pub.http.port) }}
{{- end }}
{{- join "," (concat $own $pub.replication.fleetUrls) }}
{{- end }}

{{/*
Without replication every replica adopts every partition at start: only one may run,
and an upgrade must stop it before its successor starts.
*/}}
{{- define "l0gc.publisher.checkReplication" -}}
{{- $pub := .Values.publisher }}
{{- if eq (int $pub.http.probePort) (int $pub.http.port) }}
{{- fail (printf "publisher.http.probePort=%v is publisher.http.port: the probes need a port of their own" $pub.http.probePort) }}
{{- end }}
{{- if and $pub.replication.enabled $pub.replication.advertiseUrl (not $pub.replication.fleetUrls) }}
{{- fail (printf "publisher.replication.advertiseUrl=%s needs publisher.replication.fleetUrls: patterns that match every replica's advertised URL (the replicas and the writers accept only those)" $pub.replication.advertiseUrl) }}
{{- end }}
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
Container env of a replica: its pod name (the stable name it advertises) and pod IP
(for an `advertiseUrl` of your own).
*/}}
{{- define "l0gc.publisher.replicaEnv" -}}
{{- if .Values.publisher.replication.enabled }}
- name: L0GC_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: L0GC_POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- end }}

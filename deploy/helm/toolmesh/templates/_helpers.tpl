{{/* The labels on every object. */}}
{{- define "toolmesh.labels" -}}
app.kubernetes.io/name: toolmesh
app.kubernetes.io/part-of: toolmesh
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* Selector labels of one component: (dict "root" $ "component" "registry"). */}}
{{- define "toolmesh.selector" -}}
app.kubernetes.io/name: toolmesh
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Name of an object of this release: (dict "root" $ "name" "registry"). */}}
{{- define "toolmesh.name" -}}
{{ printf "%s-%s" .root.Release.Name .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "toolmesh.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The policy ConfigMap's name. */}}
{{- define "toolmesh.policyConfigMap" -}}
{{- if .Values.policy.existingConfigMap -}}
{{ .Values.policy.existingConfigMap }}
{{- else -}}
{{ include "toolmesh.name" (dict "root" . "name" "policy") }}
{{- end -}}
{{- end }}

{{/*
The SHA-256 of the token under `key` of auth.tokenSecret, checked:
(dict "root" $ "key" "dispatcher" "required" true).
*/}}
{{- define "toolmesh.tokenSha256" -}}
{{- $sha := get .root.Values.auth.tokenSha256 .key | default "" | trim | lower -}}
{{- $make := printf "create the Secret %s (kubectl create secret generic %s --from-literal=dispatcher=$(openssl rand -hex 32) --from-literal=executor=$(openssl rand -hex 32) --from-literal=agent=$(openssl rand -hex 32)), then pass --set auth.tokenSha256.%s=$(kubectl get secret %s -o jsonpath='{.data.%s}' | base64 -d | sha256sum | cut -d' ' -f1)" .root.Values.auth.tokenSecret .root.Values.auth.tokenSecret .key .root.Values.auth.tokenSecret .key -}}
{{- if and (not $sha) .required -}}
{{- fail (printf "auth.tokenSha256.%s is empty: the policy must name the %s token, or no tool is served. To fix: %s (see deploy/README.md, \"Credentials\")" .key .key $make) -}}
{{- end -}}
{{- if and $sha (not (regexMatch "^[0-9a-f]{64}$" $sha)) -}}
{{- fail (printf "auth.tokenSha256.%s is %q, not the 64 hex digits of a SHA-256. To fix: %s" .key $sha $make) -}}
{{- end -}}
{{- $sha -}}
{{- end }}

{{/*
The policy file: [auth] and one [[callers]] entry per token of
auth.tokenSecret (by its SHA-256), then policy.toml. Anonymous callers get
no role, or only `agent` with auth.allowAnonymousAgents; never
`dispatcher` or `admin`.
*/}}
{{- define "toolmesh.policy" -}}
[auth]
{{- if .Values.auth.allowAnonymousAgents }}
allow_anonymous = true
anonymous = { principal = "anonymous", tenant = "default", roles = ["agent"] }
{{- else }}
allow_anonymous = false
{{- end }}

{{- $wi := .Values.auth.workloadIdentity }}
{{- if $wi.enabled }}

# The cluster's service-account tokens (projected, audience {{ $wi.audience }}).
# Only the accounts pinned below get a role.
[[issuers]]
issuer = {{ $wi.issuer | quote }}
audiences = [{{ $wi.audience | quote }}]
jwks_uri = {{ $wi.jwksUri | quote }}
jwks_ca_file = "/var/run/secrets/toolmesh/kube-api/ca.crt"
jwks_bearer_file = "/var/run/secrets/toolmesh/kube-api/token"
algorithms = ["RS256", "ES256"]

# Dispatchers read snapshots with their account's token.
[[callers]]
issuer = {{ $wi.issuer | quote }}
subject = "system:serviceaccount:{{ .Release.Namespace }}:{{ include "toolmesh.name" (dict "root" . "name" "dispatcher") }}"
principal = "toolmesh-dispatchers"
roles = ["dispatcher"]
{{- range $e := .Values.executors }}

# Executor {{ $e.name }} registers with its account's token.
[[callers]]
issuer = {{ $wi.issuer | quote }}
subject = "system:serviceaccount:{{ $.Release.Namespace }}:{{ include "toolmesh.name" (dict "root" $ "name" (printf "executor-%s" $e.name)) }}"
principal = "executor-{{ $e.name }}"
roles = ["executor"]
{{- end }}
{{- else }}

# Dispatchers read snapshots with this token (--registry-token).
[[callers]]
token_sha256 = "{{ include "toolmesh.tokenSha256" (dict "root" . "key" "dispatcher" "required" true) }}"
principal = "toolmesh-dispatchers"
roles = ["dispatcher"]

# Executors register with this token.
[[callers]]
token_sha256 = "{{ include "toolmesh.tokenSha256" (dict "root" . "key" "executor" "required" true) }}"
principal = "toolmesh-executors"
roles = ["executor"]
{{- end }}
{{- with include "toolmesh.tokenSha256" (dict "root" . "key" "agent" "required" false) }}

# Agents list and call tools with this token.
[[callers]]
token_sha256 = "{{ . }}"
principal = "agents"
roles = ["agent"]
{{- end }}

{{ .Values.policy.toml }}
{{- end }}

{{/* What the pods' checksum/policy annotation hashes: the policy they load. */}}
{{- define "toolmesh.policyChecksum" -}}
{{- if .Values.policy.existingConfigMap -}}
{{ .Values.policy.existingConfigMap | sha256sum }}
{{- else -}}
{{ include "toolmesh.policy" . | sha256sum }}
{{- end -}}
{{- end }}

{{/* Flags every process of the mesh takes. */}}
{{- define "toolmesh.commonArgs" -}}
- --grace-ms={{ .Values.graceMs }}
- --log-format={{ .Values.logFormat }}
{{- if .Values.metrics.enabled }}
- --admin-listen=0.0.0.0:{{ .Values.metrics.port }}
{{- /* Prometheus scrapes by pod IP: any Host, not only loopback. */}}
- --admin-allowed-hosts=*
{{- end }}
{{- end }}

{{/*
Flags of the servers (registry, dispatchers) beside the common ones: their
/metrics name tools, so it needs an admin or operator token unless served
publicly; the chart's scrape sends none, so it asks for public metrics.
*/}}
{{- define "toolmesh.serverArgs" -}}
{{- if .Values.metrics.enabled }}
- --public-metrics
{{- end }}
{{- end }}

{{/* TLS files from the mounted Secret, as TOOLMESH_TLS_* variables. */}}
{{- define "toolmesh.tlsEnv" -}}
{{- if .Values.tls.enabled }}
- name: TOOLMESH_TLS_CA
  value: /etc/toolmesh/tls/ca.crt
- name: TOOLMESH_TLS_CERT
  value: /etc/toolmesh/tls/tls.crt
- name: TOOLMESH_TLS_KEY
  value: /etc/toolmesh/tls/tls.key
{{- if .Values.tls.requireClientCertificates }}
- name: TOOLMESH_TLS_CLIENT_CA
  value: /etc/toolmesh/tls/ca.crt
{{- end }}
{{- end }}
{{- end }}

{{/*
How Prometheus reaches an admin listener: with tls.enabled it serves HTTPS
and (tls.requireClientCertificates) asks for a client certificate, so the
monitors scrape https, check the server against ca.crt and present
tls.crt/tls.key, all from the TLS Secret (or
metrics.serviceMonitor.tlsSecretName); serverName when the certificates do
not name the pod IP Prometheus dials.
*/}}
{{- define "toolmesh.scrapeTls" -}}
{{- if .Values.tls.enabled }}
{{- $secret := .Values.metrics.serviceMonitor.tlsSecretName | default .Values.tls.secretName }}
scheme: https
tlsConfig:
  ca:
    secret:
      name: {{ $secret }}
      key: ca.crt
  cert:
    secret:
      name: {{ $secret }}
      key: tls.crt
  keySecret:
    name: {{ $secret }}
    key: tls.key
  {{- with .Values.metrics.serviceMonitor.tlsServerName }}
  serverName: {{ . }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Ports of a server: (dict "root" $ "port" 7070 "healthPort" 7071), and "mcpPort" 7082 for the MCP door. */}}
{{- define "toolmesh.ports" -}}
- name: grpc
  containerPort: {{ .port }}
- name: health
  containerPort: {{ .healthPort }}
{{- with .mcpPort }}
- name: mcp
  containerPort: {{ . }}
{{- end }}
{{- if .root.Values.metrics.enabled }}
- name: admin
  containerPort: {{ .root.Values.metrics.port }}
{{- end }}
{{- end }}

{{/*
Native gRPC probes on the plaintext health-only port: liveness asks a name
that stays SERVING while a server drains (a dispatcher's liveness name also
while it waits for its first snapshot), readiness asks "" (NOT_SERVING from
SIGTERM on, and on a dispatcher until it holds a snapshot). (dict "healthPort" 7071 "service" "toolmesh.v1.Registry")
*/}}
{{- define "toolmesh.probes" -}}
livenessProbe:
  grpc:
    port: {{ .healthPort }}
    service: {{ .service }}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  grpc:
    port: {{ .healthPort }}
    service: ""
  periodSeconds: 5
{{- end }}

{{- define "toolmesh.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "toolmesh.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Mounts of the servers: the policy and TLS files, and with workload
identity what reading the cluster's keys takes. */}}
{{- define "toolmesh.volumeMounts" -}}
- name: policy
  mountPath: /etc/toolmesh/policy
  readOnly: true
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/toolmesh/tls
  readOnly: true
{{- end }}
{{- if .Values.auth.workloadIdentity.enabled }}
- name: kube-api
  mountPath: /var/run/secrets/toolmesh/kube-api
  readOnly: true
{{- end }}
{{- end }}

{{- define "toolmesh.volumes" -}}
- name: policy
  configMap:
    name: {{ include "toolmesh.policyConfigMap" . }}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- if .Values.auth.workloadIdentity.enabled }}
# The pod's own token for the API server and the cluster's CA: the
# servers fetch the service-account issuer's keys with them.
- name: kube-api
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ .Values.auth.workloadIdentity.expirationSeconds }}
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
{{- end }}
{{- end }}

{{/* With workload identity: the projected token a pod presents to the mesh. */}}
{{- define "toolmesh.identityVolume" -}}
- name: identity
  projected:
    sources:
      - serviceAccountToken:
          path: token
          audience: {{ .Values.auth.workloadIdentity.audience }}
          expirationSeconds: {{ .Values.auth.workloadIdentity.expirationSeconds }}
{{- end }}

{{- define "toolmesh.identityMount" -}}
- name: identity
  mountPath: /var/run/secrets/toolmesh/identity
  readOnly: true
{{- end }}

{{/*
Spreads a component's pods over nodes and zones: (dict "root" $
"component" "dispatcher"), or (dict "selector" DICT) for the pods those
labels select.
*/}}
{{- define "toolmesh.spread" -}}
{{- $selector := .selector -}}
{{- if not $selector -}}
{{- $selector = include "toolmesh.selector" (dict "root" .root "component" .component) | fromYaml -}}
{{- end -}}
{{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
- maxSkew: 1
  topologyKey: {{ . }}
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
{{- end }}
{{- end }}

{{/*
No pod of the chart calls the Kubernetes API with the token Kubernetes
mounts by default: servers that read the service-account issuer's keys
(workload identity) take a projected token of their own (the kube-api
volume), so the automatic one is left out everywhere.
*/}}
{{- define "toolmesh.noApiToken" -}}
automountServiceAccountToken: false
{{- end }}

{{/*
Keeps a component's replicas on different nodes where the cluster has them
(preferred: a one-node cluster still runs them all).
*/}}
{{- define "toolmesh.antiAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "toolmesh.selector" . | nindent 12 }}
{{- end }}

{{/* The Host names the MCP door accepts (--mcp-allowed-hosts). */}}
{{- define "toolmesh.mcpAllowedHosts" -}}
{{- $service := include "toolmesh.name" (dict "root" . "name" "dispatcher") -}}
{{- $hosts := list "localhost" "127.0.0.1" $service -}}
{{- range list "$(POD_NAMESPACE)" "$(POD_NAMESPACE).svc" "$(POD_NAMESPACE).svc.cluster.local" }}
{{- $hosts = append $hosts (printf "%s.%s" $service .) -}}
{{- end }}
{{- if .Values.mcp.ingress.enabled }}
{{- $hosts = append $hosts (required "mcp.ingress.host is required with mcp.ingress.enabled: the Host name the Ingress serves the MCP door on" .Values.mcp.ingress.host) -}}
{{- end }}
{{- join "," (concat $hosts .Values.mcp.extraAllowedHosts) -}}
{{- end }}

{{/* The bundled etcd's name, and its members' peer and client URLs. */}}
{{- define "toolmesh.etcdName" -}}
{{ include "toolmesh.name" (dict "root" . "name" "etcd") }}
{{- end }}

{{/* The URL of bundled etcd member `i` on `port`: (dict "root" $ "i" 0 "port" 2380). */}}
{{- define "toolmesh.etcdMemberUrl" -}}
{{- $name := include "toolmesh.etcdName" .root -}}
{{ printf "http://%s-%d.%s-headless.$(POD_NAMESPACE).svc:%d" $name (int .i) $name (int .port) }}
{{- end }}

{{/*
The registries' store (--store), or nothing for one registry holding its
state in memory; refuses settings that cannot serve, saying what to set.
*/}}
{{- define "toolmesh.store" -}}
{{- $etcd := .Values.etcd -}}
{{- $replicas := int .Values.registry.replicas -}}
{{- if and $etcd.bundled.enabled $etcd.endpoints -}}
{{- fail "etcd.bundled.enabled and etcd.endpoints are both set: use the bundled etcd or your own, not both" -}}
{{- end -}}
{{- if and $etcd.bundled.enabled (or $etcd.tls.secretName $etcd.auth.user) -}}
{{- fail "etcd.tls and etcd.auth are for your own etcd (etcd.endpoints); the bundled etcd serves plaintext to the registries alone (networkPolicy)" -}}
{{- end -}}
{{- if and $etcd.bundled.enabled (eq (mod (int $etcd.bundled.replicas) 2) 0) -}}
{{- fail (printf "etcd.bundled.replicas is %d: an etcd cluster needs an odd number of members (3 or 5) to keep a quorum" (int $etcd.bundled.replicas)) -}}
{{- end -}}
{{- if and (gt $replicas 1) (not (or $etcd.bundled.enabled $etcd.endpoints)) -}}
{{- fail (printf "registry.replicas is %d, but replicas share their state only through etcd: set etcd.bundled.enabled=true (a %d-member etcd in this release) or etcd.endpoints={host:2379,...} (your etcd cluster), or use -f values-ha.yaml; or set registry.replicas=1" $replicas (int $etcd.bundled.replicas)) -}}
{{- end -}}
{{- if and (gt $replicas 1) .Values.registry.persistence.enabled -}}
{{- fail "registry.persistence is for one registry without etcd; with etcd the registries keep their state in etcd: set registry.persistence.enabled=false" -}}
{{- end -}}
{{- if $etcd.bundled.enabled -}}
{{- $name := include "toolmesh.etcdName" . -}}
{{- $members := list -}}
{{- range $i := until (int $etcd.bundled.replicas) }}
{{- $members = append $members (printf "%s-%d.%s-headless:%d" $name $i $name (int $etcd.bundled.clientPort)) -}}
{{- end }}
{{- printf "etcd://%s" (join "," $members) -}}
{{- else if $etcd.endpoints -}}
{{- printf "etcd://%s" (join "," $etcd.endpoints) -}}
{{- end -}}
{{- end }}

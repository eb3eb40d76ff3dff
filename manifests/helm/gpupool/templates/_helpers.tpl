{{/* Names: "<release>-gpupool", or the release name when it already says gpupool. */}}
{{- define "gpupool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpupool.webhookName" -}}{{ include "gpupool.fullname" . }}-webhook{{- end -}}
{{- define "gpupool.agentName" -}}{{ include "gpupool.fullname" . }}-agent{{- end -}}
{{- define "gpupool.scanName" -}}{{ include "gpupool.fullname" . }}-scan{{- end -}}
{{- define "gpupool.tlsSecret" -}}
{{- if eq .Values.certificates.mode "secret" -}}
{{- required "certificates.secret.name is required with certificates.mode=secret" .Values.certificates.secret.name -}}
{{- else -}}
{{- include "gpupool.webhookName" . }}-tls
{{- end -}}
{{- end -}}

{{- define "gpupool.labels" -}}
app.kubernetes.io/part-of: gpupool
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpupool.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Namespaces no gpupool webhook ever sees: the control plane's and gpupool's own. */}}
{{- define "gpupool.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ concat .Values.webhook.excludedNamespaces (list .Release.Namespace) | uniq | toJson }}
{{- end -}}

{{/*
The CEL test for "a GPU resource name", from policy.gpuResources, so the webhooks'
matchConditions can never disagree with the policy: plain names become one `in` list, a
trailing `*` becomes startsWith.
*/}}
{{- define "gpupool.resourceTest" -}}
{{- $names := list -}}
{{- $tests := list -}}
{{- range .Values.policy.gpuResources -}}
{{- if hasSuffix "*" . -}}
{{- if contains "*" (trimSuffix "*" .) -}}
{{- fail (printf "policy.gpuResources: %q: only a trailing * can be expressed in the webhooks' matchConditions" .) -}}
{{- end -}}
{{- $tests = append $tests (printf "r.startsWith('%s')" (trimSuffix "*" .)) -}}
{{- else -}}
{{- $names = append $names (printf "'%s'" .) -}}
{{- end -}}
{{- end -}}
{{- if $names -}}
{{- $tests = prepend $tests (printf "r in [%s]" (join ", " $names)) -}}
{{- end -}}
{{- join " || " $tests -}}
{{- end -}}

{{/* Some container of the list asks for a GPU resource (limits or requests). */}}
{{- define "gpupool.gpuContainers" -}}
{{- $r := include "gpupool.resourceTest" .root -}}
{{- printf "%s.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, %s)) || (has(c.resources.requests) && c.resources.requests.exists(r, %s))))" .list $r $r -}}
{{- end -}}

{{/* The pod spec at .spec asks for a GPU in a container or an init container. */}}
{{- define "gpupool.gpuSpec" -}}
{{- $c := include "gpupool.gpuContainers" (dict "root" .root "list" (printf "%s.containers" .spec)) -}}
{{- $i := include "gpupool.gpuContainers" (dict "root" .root "list" (printf "%s.initContainers" .spec)) -}}
{{- $dra := printf "(has(%s.resourceClaims) && size(%s.resourceClaims) > 0) || %s.containers.exists(c, has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith('deviceclass.resource.kubernetes.io/')))" .spec .spec .spec -}}
{{- printf "%s || (has(%s.initContainers) && %s) || %s" $c .spec $i $dra -}}
{{- end -}}

{{- define "gpupool.clientConfig" -}}
{{- if .root.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path | quote }}
{{- else }}
service:
  name: {{ include "gpupool.webhookName" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- with (include "gpupool.caBundle" .root) }}
caBundle: {{ . }}
{{- end }}
{{- end -}}

{{/*
Certificate material for certificates.mode=generate: made once per render and kept across
upgrades by reading back the Secret already in the cluster (lookup), so an upgrade never
changes the CA the webhooks trust. `helm template` has no cluster, so it always generates.
*/}}
{{- define "gpupool.generatedCerts" -}}
{{- if not .Values._certs -}}
{{- $name := include "gpupool.tlsSecret" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $name -}}
{{- if and $existing $existing.data (hasKey $existing.data "tls.crt") (hasKey $existing.data "caBundle") -}}
{{- $_ := set .Values "_certs" (dict "crt" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key") "ca" (index $existing.data "caBundle")) -}}
{{- else -}}
{{- $svc := include "gpupool.webhookName" . -}}
{{- $ns := .Release.Namespace -}}
{{- $days := int .Values.certificates.generate.validityDays -}}
{{- $ca := genCA (printf "%s-ca.%s" (include "gpupool.fullname" .) $ns) $days -}}
{{- $dns := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $cert := genSignedCert $svc nil $dns $days $ca -}}
{{- $_ := set .Values "_certs" (dict "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) "ca" ($ca.Cert | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpupool.caBundle" -}}
{{- if eq .Values.certificates.mode "generate" -}}
{{- include "gpupool.generatedCerts" . -}}
{{- .Values._certs.ca -}}
{{- else if eq .Values.certificates.mode "secret" -}}
{{- required "certificates.secret.caBundle (base64 PEM of the CA) is required with certificates.mode=secret" .Values.certificates.secret.caBundle -}}
{{- end -}}
{{- end -}}

{{/*
What values.schema.json cannot say about the policy: the cross-field rules of the policy
loader (webhook/engine/policy.py), so a bad policy fails at install, not in the pods.
*/}}
{{- define "gpupool.checkPolicy" -}}
{{- $p := .Values.policy -}}
{{- $names := list -}}
{{- $labelValues := dict -}}
{{- range $i, $pool := $p.pools -}}
{{- if has $pool.name $names -}}
{{- fail (printf "policy.pools[%d].name: duplicate pool %q" $i $pool.name) -}}
{{- end -}}
{{- $names = append $names $pool.name -}}
{{- range $pool.labelValues -}}
{{- if hasKey $labelValues . -}}
{{- fail (printf "policy.pools[%d].labelValues: %q already belongs to pool %q" $i . (get $labelValues .)) -}}
{{- end -}}
{{- $_ := set $labelValues . $pool.name -}}
{{- end -}}
{{- end -}}
{{- if not (has $p.defaultPool $names) -}}
{{- fail (printf "policy.defaultPool: %q is not a pool (pools: %s)" $p.defaultPool (join ", " $names)) -}}
{{- end -}}
{{- range $i, $pool := $p.pools -}}
{{- if and (ne $pool.name $p.defaultPool) (not $pool.labelValues) -}}
{{- fail (printf "policy.pools[%d].labelValues: pool %q is not the default pool, so it needs at least one label value" $i $pool.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{/* The pools' schedulers other than kube-scheduler, by name (their Leases' names). */}}
{{- define "gpupool.schedulerNames" -}}
{{- $names := list -}}
{{- range .Values.policy.pools -}}
{{- if and .schedulerName (ne .schedulerName "default-scheduler") -}}
{{- $names = append $names .schedulerName -}}
{{- end -}}
{{- end -}}
{{- join ", " ($names | uniq) -}}
{{- end -}}

{{/* Namespaces the grant check never sees: those above, and the policy's exempt ones. */}}
{{- define "gpupool.accessNamespaceSelector" -}}
{{- $access := .Values.policy.access | default dict -}}
{{- $exempt := $access.exemptNamespaces | default (list "gpu-operator" "kube-system" "nvidia-device-plugin") -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ concat .Values.webhook.excludedNamespaces (list .Release.Namespace) $exempt | uniq | toJson }}
{{- end -}}

{{/*
A pod created with HAMi's scheduler-owned annotations, or an update that adds or changes one,
by anyone but the policy's access.schedulerIdentities (webhook/engine/access/schedulerstate.py
tests the same keys).
*/}}
{{- define "gpupool.schedulerStateExpr" -}}
{{- $access := .Values.policy.access | default dict -}}
{{- $owners := $access.schedulerIdentities | default (list "system:serviceaccount:kube-system:hami-scheduler" "system:serviceaccount:kube-system:hami-device-plugin") -}}
{{- $quoted := list -}}
{{- range $owners }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end -}}
{{- $owned := "(k in ['hami.io/vgpu-devices-to-allocate', 'hami.io/vgpu-devices-allocated', 'hami.io/vgpu-node', 'hami.io/vgpu-time', 'hami.io/bind-time', 'hami.io/bind-phase'] || (k.startsWith('hami.io/') && (k.endsWith('-devices-to-allocate') || k.endsWith('-devices-allocated'))))" -}}
{{- printf "!(request.userInfo.username in [%s]) && has(object.metadata.annotations) && object.metadata.annotations.exists(k, %s && (request.operation == 'CREATE' || !has(oldObject.metadata.annotations) || !(k in oldObject.metadata.annotations) || oldObject.metadata.annotations[k] != object.metadata.annotations[k]))" (join ", " $quoted) $owned -}}
{{- end -}}

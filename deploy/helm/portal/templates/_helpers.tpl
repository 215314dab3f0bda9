{{/* Name of the chart, or nameOverride. */}}
{{- define "portal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name. */}}
{{- define "portal.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "portal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "portal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector of every Portal pod of the release. */}}
{{- define "portal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "portal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "portal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "portal.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "portal.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "portal.webhookService" -}}{{ include "portal.fullname" . }}-webhook{{- end }}
{{- define "portal.webhookConfigName" -}}{{ default (include "portal.fullname" .) .Values.admission.configName }}{{- end }}
{{- define "portal.certSecret" -}}{{ include "portal.fullname" . }}-webhook-cert{{- end }}
{{- define "portal.wafCacheCertSecret" -}}{{ include "portal.fullname" . }}-waf-cache-cert{{- end }}

{{/*
portal.components lists the Deployments as YAML: {items: [{name, component,
layers, replicas, resources}]}. Single mode: one Deployment "portal" with
every enabled layer. Split mode: one per enabled layer.
*/}}
{{- define "portal.components" -}}
{{- $v := .Values }}
{{- $fullname := include "portal.fullname" . }}
{{- $layers := list }}
{{- range $l := list "admission" "audit" "network" "runtime" "waf" "apigateway" }}
{{- if (index $v $l).enabled }}{{ $layers = append $layers $l }}{{ end }}
{{- end }}
items:
{{- if eq $v.global.mode "split" }}
{{- range $l := $layers }}
  - name: {{ printf "%s-%s" $fullname $l }}
    component: {{ $l }}
    layers: [{{ $l }}]
    replicas: {{ (index $v $l).replicaCount }}
    resources: {{ default $v.resources (index $v $l).resources | toJson }}
    serviceAccount: {{ include "portal.unitServiceAccount" (dict "root" $ "layer" $l) }}
{{- end }}
{{- else }}
  - name: {{ $fullname }}
    component: portal
    layers: {{ $layers | toJson }}
    replicas: {{ $v.replicaCount }}
    resources: {{ $v.resources | toJson }}
    serviceAccount: {{ include "portal.serviceAccountName" . }}
{{- end }}
{{- end }}

{{/*
portal.perLayerRBAC is true (non-empty) when each Deployment gets a
ServiceAccount and RBAC of its own: split mode, with the chart creating the
ServiceAccounts. A ServiceAccount you bring (serviceAccount.create=false)
gets the RBAC of every layer.
*/}}
{{- define "portal.perLayerRBAC" -}}
{{- if and (eq .Values.global.mode "split") .Values.serviceAccount.create }}true{{ end }}
{{- end }}

{{/* portal.unitServiceAccount is the ServiceAccount of the Deployment of (dict root layer). */}}
{{- define "portal.unitServiceAccount" -}}
{{- if include "portal.perLayerRBAC" .root }}
{{- printf "%s-%s" (include "portal.serviceAccountName" .root) .layer | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "portal.serviceAccountName" .root }}
{{- end }}
{{- end }}

{{/*
portal.rbacUnits lists who gets which RBAC as YAML {items: [{name,
serviceAccount, layers}]}: each Deployment with portal.perLayerRBAC, else
one unit with every enabled layer.
*/}}
{{- define "portal.rbacUnits" -}}
{{- $components := (include "portal.components" . | fromYaml).items }}
items:
{{- if include "portal.perLayerRBAC" . }}
{{- range $c := $components }}
  - name: {{ $c.name }}
    serviceAccount: {{ $c.serviceAccount }}
    layers: {{ $c.layers | toJson }}
{{- end }}
{{- else }}
{{- $all := list }}
{{- range $c := $components }}{{ $all = concat $all $c.layers }}{{ end }}
  - name: {{ include "portal.fullname" . }}
    serviceAccount: {{ include "portal.serviceAccountName" . }}
    layers: {{ $all | toJson }}
{{- end }}
{{- end }}

{{/*
portal.hookName names the uninstall hook's Job and its own ServiceAccount,
Role and ClusterRole, which exist only while the hook runs.
*/}}
{{- define "portal.hookName" -}}{{ include "portal.fullname" . }}-uninstall{{- end }}

{{- define "portal.hookLabels" -}}
{{ include "portal.labels" . }}
app.kubernetes.io/component: uninstall
{{- end }}

{{/* The hook's RBAC: created before its Job, deleted with it on success. */}}
{{- define "portal.hookRBACAnnotations" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
portal.runtimeSecrets is the comma-separated list of the certificate
Secrets Portal issues at run time, which the uninstall hook deletes.
*/}}
{{- define "portal.runtimeSecrets" -}}
{{- $secrets := list }}
{{- if and .Values.admission.enabled (not .Values.certManager.enabled) }}{{ $secrets = append $secrets (include "portal.certSecret" .) }}{{ end }}
{{- if .Values.waf.enabled }}{{ $secrets = append $secrets (include "portal.wafCacheCertSecret" .) }}{{ end }}
{{- join "," $secrets }}
{{- end }}

{{/* portal.checks fails the render on value combinations that cannot work. */}}
{{- define "portal.checks" -}}
{{- if not (or .Values.admission.enabled .Values.audit.enabled .Values.network.enabled .Values.runtime.enabled .Values.waf.enabled .Values.apigateway.enabled) }}
{{- fail "enable at least one of admission.enabled, audit.enabled, network.enabled, runtime.enabled, waf.enabled and apigateway.enabled" }}
{{- end }}
{{- with .Values.runtime }}
{{- if .enabled }}
{{- if not .certSecret }}
{{- fail "runtime.certSecret: name the Secret with the runtime endpoint's tls.crt and tls.key: the API server posts audit events over HTTPS only" }}
{{- end }}
{{- if and .clientCA.configMap .clientCA.secret }}
{{- fail "runtime.clientCA: set configMap or secret, not both" }}
{{- end }}
{{- if not (or .clientCA.configMap .clientCA.secret .auditTokenSecret .falcoTokenSecret) }}
{{- fail "runtime: set runtime.clientCA (the API server's client certificate CA) or runtime.auditTokenSecret / runtime.falcoTokenSecret: the endpoint accepts no anonymous caller" }}
{{- end }}
{{- end }}
{{- if and .auditLog.enabled (not .enabled) }}
{{- fail "runtime.auditLog.enabled needs runtime.enabled: the DaemonSet runs with the runtime layer's RBAC" }}
{{- end }}
{{- end }}
{{- with .Values.admission.clientCA }}
{{- if and .configMap .secret }}
{{- fail "admission.clientCA: set configMap or secret, not both" }}
{{- end }}
{{- if and .allowedNames (not (or .configMap .secret)) }}
{{- fail "admission.clientCA.allowedNames needs admission.clientCA.configMap or admission.clientCA.secret: names are checked on certificates signed by that CA" }}
{{- end }}
{{- end }}
{{- if and .Values.global.failClosed .Values.admission.enabled (not .Values.podDisruptionBudget.enabled) }}
{{- fail "global.failClosed requires podDisruptionBudget.enabled: without it a node drain can stop every replica and block admission; set global.failClosed=false to run without a PodDisruptionBudget" }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security Standard, for pods and containers. */}}
{{- define "portal.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "portal.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* RBAC rules for a list of {apiGroup, resources} with the given verbs. */}}
{{- define "portal.resourceRules" -}}
{{- $verbs := .verbs }}
{{- range .list }}
- apiGroups: [{{ .apiGroup | quote }}]
  resources: {{ .resources | toJson }}
  verbs: {{ $verbs | toJson }}
{{- end }}
{{- end }}

{{/*
portal.actionTypes is the comma-separated --actions-enabled list: the
action types whose actions.<name>.enabled is true.
*/}}
{{- define "portal.actionTypes" -}}
{{- $a := .Values.actions }}
{{- $types := list }}
{{- range $pair := list (list "alertmanager" "alertmanager") (list "label" "label") (list "annotate" "annotate") (list "evict" "evict") (list "patchNetworkPolicy" "patch-networkpolicy") (list "revokeToken" "revoke-sa-token") }}
{{- if (index $a (index $pair 0)).enabled }}{{ $types = append $types (index $pair 1) }}{{ end }}
{{- end }}
{{- join "," $types }}
{{- end }}

{{/*
portal.actionsOn is true (non-empty) when the Deployment of (dict root
layers) runs the actions: with audit, with runtime, or with admission when
audit is off.
*/}}
{{- define "portal.actionsOn" -}}
{{- $v := .root.Values }}
{{- if and (include "portal.actionTypes" .root) (or (has "audit" .layers) (has "runtime" .layers) (and (not $v.audit.enabled) (has "admission" .layers))) }}true{{ end }}
{{- end }}

{{/*
portal.forwardOn is true (non-empty) when the Deployment of (dict root
layers) runs admission and the actions, and forwards the admission verdicts
of its replicas that do not lead to the one that does
(actions.forwardVerdicts). With admission.clientCA too: the webhook server
then requires the API server's client certificate on every path but the
forwarding endpoint, which takes Portal's ServiceAccount token.
*/}}
{{- define "portal.forwardOn" -}}
{{- if and .root.Values.actions.forwardVerdicts (has "admission" .layers) (include "portal.actionsOn" .) }}true{{ end }}
{{- end }}

{{/* portal.clientCA is true (non-empty) when the webhook requires client certificates. */}}
{{- define "portal.clientCA" -}}
{{- with .Values.admission.clientCA }}{{ if or .configMap .secret }}true{{ end }}{{ end }}
{{- end }}

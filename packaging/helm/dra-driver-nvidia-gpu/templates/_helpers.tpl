{{/*
Names. They follow the reference chart's rules, so that the same release name and values
give the same object names: `name` is the chart name (or nameOverride) and prefixes the
workloads, RBAC objects and the Lease; `fullname` is the release name, with the chart name
appended unless the release name already contains it, and prefixes the ServiceAccounts.
*/}}
{{- define "cd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cd.fullname" -}}
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

{{- define "cd.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Standard labels of every object (https://helm.sh/docs/chart_best_practices/labels/). */}}
{{- define "cd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" (default .Chart.Name .Values.nameOverride) .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{ include "cd.templateLabels" . }}
{{- end -}}

{{/* The labels of every pod template. */}}
{{- define "cd.templateLabels" -}}
app.kubernetes.io/name: {{ include "cd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The one selector label of a component: `<name>-component: <component>` (runbooks select
the plugin pods with `-l dra-driver-nvidia-gpu-component=kubelet-plugin`).
Call with (dict "context" $ "component" "controller").
*/}}
{{- define "cd.selectorLabels" -}}
{{- if .context.Values.selectorLabelsOverride -}}
{{ toYaml .context.Values.selectorLabelsOverride }}
{{- else -}}
{{ include "cd.name" .context }}-component: {{ .component }}
{{- end -}}
{{- end -}}

{{- define "cd.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (printf "v%s" .Chart.AppVersion)) -}}
{{- end -}}

{{/* The prefix of the controller's and the plugin's ServiceAccount names. */}}
{{- define "cd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-service-account" (include "cd.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cd.controllerServiceAccount" -}}
{{ include "cd.serviceAccountName" . }}-controller
{{- end -}}

{{- define "cd.pluginServiceAccount" -}}
{{ include "cd.serviceAccountName" . }}-kubeletplugin
{{- end -}}

{{/* The IMEX daemon pods' ServiceAccount (api/names.py DAEMON_SERVICE_ACCOUNT). */}}
{{- define "cd.daemonServiceAccount" -}}
compute-domain-daemon-service-account
{{- end -}}

{{- define "cd.hostManaged" -}}
{{- if eq .Values.resources.computeDomains.imex.mode "hostManaged" -}}true{{- end -}}
{{- end -}}

{{/* IMEX_PLACEMENT: pod or agent (pod where a values file from before the key lacks it). */}}
{{- define "cd.placement" -}}
{{- default "pod" .Values.resources.computeDomains.imex.placement -}}
{{- end -}}

{{/*
The kubelet plugin supervises nvidia-imex itself (driverManaged, placement agent): no daemon
DeviceClass, daemon RBAC or daemon policies; the plugin writes its node's clique entries.
*/}}
{{- define "cd.agentPlacement" -}}
{{- if and (not (include "cd.hostManaged" .)) (eq (include "cd.placement" .) "agent") -}}true{{- end -}}
{{- end -}}

{{/* The controller creates IMEX daemon pods (driverManaged, placement pod). */}}
{{- define "cd.daemonPods" -}}
{{- if not (or (include "cd.hostManaged" .) (include "cd.agentPlacement" .)) -}}true{{- end -}}
{{- end -}}

{{/*
The driver namespace and the controller's ADDITIONAL_NAMESPACES, comma-separated, without
duplicates: the controller looks for (and cleans up) daemon DaemonSets and cliques in each,
so its Role, the plugin's and the daemon ServiceAccount are in each.
*/}}
{{- define "cd.namespaces" -}}
{{- $all := list (include "cd.namespace" .) -}}
{{- range .Values.controller.containers.computeDomain.env -}}
{{- if and (eq .name "ADDITIONAL_NAMESPACES") .value -}}
{{- range splitList "," .value -}}
{{- if trim . -}}
{{- $all = append $all (trim .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," (uniq $all) -}}
{{- end -}}

{{/* FEATURE_GATES: name=value pairs, sorted, each followed by a comma. */}}
{{- define "cd.featureGates" -}}
{{- range $name, $on := .Values.featureGates -}}{{ $name }}={{ $on }},{{- end -}}
{{- end -}}

{{/*
resource.k8s.io version of the DeviceClasses: resourceApiVersion, else the newest the
cluster serves. Empty when it serves none (validation.yaml then fails).
*/}}
{{- define "cd.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion -}}
{{- .Values.resourceApiVersion -}}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1" -}}
resource.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2" -}}
resource.k8s.io/v1beta2
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1" -}}
resource.k8s.io/v1beta1
{{- end -}}
{{- end -}}

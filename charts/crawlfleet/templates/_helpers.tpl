{{/*
Names. The full name is truncated to 63 characters: it becomes a label value and a DNS name.
*/}}
{{- define "crawlfleet.fullname" -}}
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

{{- define "crawlfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "crawlfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "crawlfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Labels. The selector labels are immutable on a Deployment, so they hold only what never
changes for a release. The name is fixed, not nameOverride's: each CrawlJob's NetworkPolicy
admits pods labelled app.kubernetes.io/name=crawlfleet-operator and component=operator (not
the object store) to the job's Redis (the operator's OperatorConfig.operator_labels), and the workers it starts are
app.kubernetes.io/name=crawlfleet.

Each object has one component (operator, object-store): the component*Labels take
(list $root "component"), and the plain ones are the operator's. A key may appear once in a
mapping (YAML says so, and strict tools refuse a repeated one), so a template that wants another
component asks for it here instead of adding the key after these.
*/}}
{{- define "crawlfleet.componentSelectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: crawlfleet-operator
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "crawlfleet.componentLabels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ include "crawlfleet.chart" $root }}
{{ include "crawlfleet.componentSelectorLabels" . }}
app.kubernetes.io/part-of: crawlfleet
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- end }}

{{- define "crawlfleet.selectorLabels" -}}
{{ include "crawlfleet.componentSelectorLabels" (list . "operator") }}
{{- end }}

{{- define "crawlfleet.labels" -}}
{{ include "crawlfleet.componentLabels" (list . "operator") }}
{{- end }}

{{/*
The restricted Pod Security Standard for the chart's other pods (the object store and its
bucket Job, whose image runs as root unless told otherwise): a numeric user that is not root,
no privilege escalation, no capabilities, the runtime's seccomp profile, and a read-only root
filesystem (the store writes only under its volume and /tmp, each mounted). fsGroup makes the
store's claim writable by that user; OnRootMismatch changes its files' group once, not at every
start.
*/}}
{{- define "crawlfleet.restrictedPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "crawlfleet.restrictedSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/*
An image reference from {repository, tag, digest}: the digest wins, the tag defaults to the
chart's appVersion.
*/}}
{{- define "crawlfleet.image" -}}
{{- $image := index . 0 }}
{{- $root := index . 1 }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
The namespaces the operator serves, as a JSON list (empty when it watches all of them):
watchNamespaces, else the release namespace. One source for the --namespace arguments, the
Roles and the KopfPeerings, so the three cannot disagree.
*/}}
{{- define "crawlfleet.watchNamespaces" -}}
{{- if .Values.watchAllNamespaces }}
{{- list | toJson }}
{{- else if .Values.watchNamespaces }}
{{- .Values.watchNamespaces | uniq | toJson }}
{{- else }}
{{- list .Release.Namespace | toJson }}
{{- end }}
{{- end }}

{{/*
Combinations of values that the schema cannot rule out; included by the Deployment so that
`helm lint`, `helm template` and `helm install` all refuse them with the reason.
*/}}
{{- define "crawlfleet.validate" -}}
{{- if and .Values.watchAllNamespaces .Values.watchNamespaces }}
{{- fail "set watchNamespaces or watchAllNamespaces, not both: watchAllNamespaces already serves every namespace" }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.peering.enabled) }}
{{- fail "replicas > 1 needs peering.enabled: without kopf peering every replica would reconcile the same CrawlJobs at once" }}
{{- end }}
{{- end }}

{{/*
The prometheus-operator kinds are only rendered where their CRDs are served; asking for them
elsewhere is an error with the remedy, not a silently missing scrape.
*/}}
{{- define "crawlfleet.requireMonitoringAPI" -}}
{{- if not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}
{{- fail "metrics.serviceMonitor and metrics.workerPodMonitor need the prometheus-operator CRDs (monitoring.coreos.com/v1), which this cluster does not serve; install them or turn these off (with helm template, pass --api-versions monitoring.coreos.com/v1)" }}
{{- end }}
{{- end }}

{{/*
CRAWLFLEET_DEFAULT_OUTPUT: defaultOutput as the operator reads it (JSON), or objectStore's when
it is on and defaultOutput names no destination; empty when there is none.
*/}}
{{- define "crawlfleet.defaultOutput" -}}
{{- $out := .Values.defaultOutput -}}
{{- $config := dict "secretNamespace" .Release.Namespace -}}
{{- if $out.destination -}}
{{- $_ := set $config "destination" $out.destination -}}
{{- $_ := set $config "s3" (include "crawlfleet.defaultOutputS3" (list $out.s3 $out.secretName) | fromJson) -}}
{{- else if .Values.objectStore.enabled -}}
{{- $name := printf "%s-store" (include "crawlfleet.fullname" .) -}}
{{- $_ := set $config "destination" (printf "s3://%s/" .Values.objectStore.bucket) -}}
{{- $_ := set $config "s3" (dict "endpoint" (printf "http://%s.%s.svc:7070" $name .Release.Namespace) "region" "us-east-1" "pathStyle" true "secretRef" (dict "name" $name)) -}}
{{- end -}}
{{- $shared := and (hasKey $config "destination") (hasKey (get $config "s3") "secretRef") -}}
{{- $served := .Values.watchNamespaces | default (list .Release.Namespace) -}}
{{- if and $shared (or .Values.watchAllNamespaces (gt (len $served) 1)) (not $out.shareCredentials) -}}
{{- fail "defaultOutput: one shared set of credentials (defaultOutput.secretName, or objectStore's keys) would reach the worker pods of every namespace the operator serves, and each tenant could read and overwrite the others' output: give each namespace its own (defaultOutput.namespaces), or set defaultOutput.shareCredentials=true if these namespaces are one tenant (docs/security.md)" -}}
{{- end -}}
{{- if $out.namespaces -}}
{{- $each := dict -}}
{{- range $namespace, $entry := $out.namespaces -}}
{{- $s3 := mergeOverwrite (deepCopy $out.s3) ($entry.s3 | default dict) -}}
{{- $_ := set $each $namespace (dict "destination" $entry.destination "s3" (include "crawlfleet.defaultOutputS3" (list $s3 ($entry.secretName | default "")) | fromJson)) -}}
{{- end -}}
{{- $_ := set $config "namespaces" $each -}}
{{- end -}}
{{- if or (hasKey $config "destination") (hasKey $config "namespaces") -}}
{{- $config | toJson -}}
{{- end -}}
{{- end }}

{{/*
The s3 section of one default destination as the operator reads it: (list s3Values secretName).
*/}}
{{- define "crawlfleet.defaultOutputS3" -}}
{{- $values := index . 0 -}}
{{- $s3 := dict "pathStyle" $values.pathStyle -}}
{{- with $values.endpoint }}{{ $_ := set $s3 "endpoint" . }}{{ end -}}
{{- with $values.region }}{{ $_ := set $s3 "region" . }}{{ end -}}
{{- with index . 1 }}{{ $_ := set $s3 "secretRef" (dict "name" .) }}{{ end -}}
{{- $s3 | toJson -}}
{{- end }}
